"""hang_capture.py and the hook spell the console's names; the plan's wrapper really puts
the hook first on PYTHONPATH (keeping the user's) and the hook really registers."""

from __future__ import annotations

import ast
import json
import signal
import subprocess
from pathlib import Path

import pytest

from console.hostprogs import job_pack
from console.hostprogs.supervisor import hang_capture as hc
from console.hostprogs.supervisor import hang_inspect as hi
from console.inventory import Host, Inventory
from console.jobs import paths
from console.jobs.plan import ray as plan_ray
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.jobs.ssh import remote_ops
from console.jobs.ssh.remote_ops import bundled_file, wrapper_script
from console.logs.steps import DEFAULT_STEP_PATTERNS
from console.names import JOB_ID_VAR

HOSTPROGS = Path(hc.__file__).parent


def test_step_rule_copy_is_the_logs_rule() -> None:
    assert hc.HANG_STEP_PATTERNS == DEFAULT_STEP_PATTERNS


def test_job_file_names_are_the_consoles() -> None:
    assert hi.HANG_DIR == paths.HANG_DIR
    assert hc.HANG_GPU_SAMPLES == paths.GPU_SAMPLES
    assert hc.HANG_FLIGHT_RECORDER_PREFIX == paths.FLIGHT_RECORDER_PREFIX
    assert hc.HANG_LOG_SUFFIXES == (paths.STDOUT_SUFFIX, paths.STDERR_SUFFIX)
    assert hc.HANG_START_SUFFIXES == (paths.PGID_SUFFIX, paths.WRAPPER_SUFFIX)
    assert paths.ranks_dir("J") == f"J/{hc.HANG_RANKS_DIR}"
    assert hi.HANG_MARKER_VAR == JOB_ID_VAR
    assert hi.HANG_PROCESS_VAR == remote_ops.PROCESS_VAR
    # A Ray node's logs: through the plan's link, where the report's pack reads them too.
    assert hc.HANG_RAY_LOGS[0] == plan_ray.TEMP_LINK
    assert hc.HANG_RAY_LOGS == job_pack.RAY_LOGS


@pytest.mark.parametrize("name", ["hang_inspect.py", "hang_capture.py", "hang_sitecustomize.py"])
def test_host_programs_parse_as_python_3_7(name: str) -> None:
    ast.parse((HOSTPROGS / name).read_text(), feature_version=(3, 7))


def _console_only_imports(node: ast.stmt) -> bool:
    """``if __name__ != "__main__":`` holding only imports: how a part names what the
    part before it defines when the console imports it; skipped on a host."""
    return (
        isinstance(node, ast.If)
        and ast.unparse(node.test) == "__name__ != '__main__'"
        and not node.orelse
        and all(isinstance(n, ast.ImportFrom) for n in node.body)
    )


@pytest.mark.parametrize("name", ["hang_inspect.py", "hang_capture.py"])
def test_capture_is_a_part_with_prefixed_names(name: str) -> None:
    """Concatenated into the supervisor's one file: no main block, no clashing names."""
    tree = ast.parse((HOSTPROGS / name).read_text())
    for node in tree.body:
        if _console_only_imports(node):
            continue
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
        elif isinstance(node, (ast.Import, ast.ImportFrom, ast.Expr)):
            continue
        else:
            raise AssertionError(f"a top-level statement a part must not have: {ast.dump(node)}")
        for n in names:
            assert n.lstrip("_").lower().startswith("hang_"), n


def run_wrapper(tmp_path: Path, setup: str | None, env: dict[str, str]) -> dict[str, object]:
    work = tmp_path / "work"
    work.mkdir()
    program = tmp_path / "show.py"
    program.write_text(
        "import json, os, sys\n"
        "print(json.dumps({'pythonpath': os.environ.get('PYTHONPATH'),"
        " 'hooked': 'faulthandler' in sys.modules, 'pid': os.getpid()}))\n"
    )
    host = Host(name="me", address="local", gpus=1, work_dir=str(work), setup=setup)
    inventory = Inventory(path=str(tmp_path / "hosts.yaml"), hosts=(host,))
    spec = make_spec(kind="ps", program=str(program), workers=1, env=env, hang_timeout=20)
    p = plan(spec, inventory, job_id="ps-show-20260101-000000-abcdef")
    for upload in p.uploads:
        target = Path(upload.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(bundled_file(upload.resource, upload.package))
    launch = next(x for x in p.launches if x.role == "worker")
    job_dir = p.job_dirs["me"]
    script = tmp_path / "w.sh"
    script.write_text(wrapper_script(host, p.job_id, launch, job_dir))
    subprocess.run(["bash", str(script)], check=True, timeout=60)
    out = Path(job_dir) / "worker-0.out"
    shown = json.loads(out.read_text().splitlines()[-1])
    shown["hook"] = paths.hang_hook_dir(job_dir)
    shown["stacks"] = hi.hang_stacks_path(job_dir, "worker-0", shown["pid"])
    return shown


def test_wrapper_puts_the_hook_first_and_keeps_the_setup_pythonpath(tmp_path: Path) -> None:
    shown = run_wrapper(tmp_path, "export PYTHONPATH=/from/setup", {})
    assert shown["pythonpath"] == f"{shown['hook']}:/from/setup"
    assert shown["hooked"] is True  # the sitecustomize ran and imported faulthandler
    assert Path(str(shown["stacks"])).is_file()  # where the capture will look for it


def test_wrapper_keeps_the_users_pythonpath_after_the_hook(tmp_path: Path) -> None:
    shown = run_wrapper(tmp_path, None, {"PYTHONPATH": "/mine"})
    assert shown["pythonpath"] == f"{shown['hook']}:/mine"


def test_hook_uses_the_capture_signal() -> None:
    source = (HOSTPROGS / "hang_sitecustomize.py").read_text()
    assert hi.HANG_SIGNAL == signal.SIGUSR2 and "signal.SIGUSR2" in source
    assert f'"{hi.HANG_DIR}"' in source and hi.HANG_STACKS_SUFFIX in source
