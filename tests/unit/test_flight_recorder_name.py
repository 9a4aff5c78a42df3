"""PyTorch's flight recorder is sized under the name the host's torch reads, so no DDP
rank prints torch's deprecation of ``TORCH_NCCL_TRACE_BUFFER_SIZE``: the job's
sitecustomize keeps the plan's ``TORCH_FR_BUFFER_SIZE`` for the venv's torch (2.13) and
renames it for an older one. That a real DDP job's ranks print no deprecation is checked
by tests/integration/test_jobs_cli.py::test_launch_streams_prefixed_output_and_exits_0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

DEPRECATION = "TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated"


def hooked_env(tmp_path: Path, torch_version: str | None) -> dict[str, str]:
    """The job's sitecustomize first on PYTHONPATH, as a rank's wrapper puts it; with
    ``torch_version``, before it a folder ``torch/`` holding only a version.py: a
    stand-in for an older torch install, which the hook reads and never imports."""
    hook = tmp_path / "hook"
    hook.mkdir()
    source = resources.files("console.hostprogs.supervisor") / "hang_sitecustomize.py"
    (hook / "sitecustomize.py").write_text(source.read_text())
    path = [str(hook)]
    if torch_version is not None:
        old = tmp_path / "old-torch" / "torch"
        old.mkdir(parents=True)
        (old / "__init__.py").write_text("raise ImportError('a stand-in: never imported')\n")
        (old / "version.py").write_text(f"__version__ = '{torch_version}'\n")
        path.append(str(old.parent))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_")}
    env.update(PYTHONPATH=os.pathsep.join(path), TORCH_FR_BUFFER_SIZE="2000")
    return env


def names_seen(env: dict[str, str]) -> dict[str, str]:
    code = (
        "import json, os; "
        "print(json.dumps({k: v for k, v in os.environ.items() if 'BUFFER_SIZE' in k}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    seen: dict[str, str] = json.loads(done.stdout)
    return seen


@pytest.mark.parametrize(
    ("torch_version", "expected"),
    [
        (None, {"TORCH_FR_BUFFER_SIZE": "2000"}),  # the venv's torch 2.13
        ("2.7.1", {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}),
        ("2.8.0", {"TORCH_FR_BUFFER_SIZE": "2000"}),
    ],
)
def test_the_job_s_sitecustomize_names_the_size_for_the_host_s_torch(
    tmp_path: Path, torch_version: str | None, expected: dict[str, str]
) -> None:
    assert names_seen(hooked_env(tmp_path, torch_version)) == expected
