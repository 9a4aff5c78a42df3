"""Planned commands run for real on this machine: torchrun, mpirun, horovodrun, the PS
example. No ssh here (the runner's tests cover that): each launch of a one-host plan is
started the way a host's shell would run it (``cd CWD && exec ARGV`` with the plan's
environment), which checks that the argv works with the real launchers and that the
log files land where the plan's ``LogFile`` entries say.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from console.inventory import Host, Inventory
from console.jobs.models import JobPlan, RankLaunch
from console.jobs.paths import shell_join
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.jobs.ssh.remote_ops import bundled_file

pytestmark = pytest.mark.slow
VENV_BIN = str(Path(sys.executable).parent)
RUN_AS_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def local_inventory(tmp_path: Path, gpus: int = 2) -> Inventory:
    work = tmp_path / "work"
    work.mkdir()
    return Inventory(
        path=str(tmp_path / "hosts.yaml"),
        hosts=(Host(name="me", address="local", gpus=gpus, work_dir=str(work)),),
    )


def upload(p: JobPlan) -> None:
    for item in p.uploads:
        target = Path(item.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(bundled_file(item.resource, item.package))


def start(launch: RankLaunch) -> subprocess.Popen[bytes]:
    out, err = (Path(log.path) for log in launch.log_paths[:2])
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", **launch.env}
    command = f"cd {shell_join([launch.cwd])} && exec {shell_join(launch.argv)}"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        return subprocess.Popen(["bash", "-c", command], env=env, stdout=stdout, stderr=stderr)


def run_all(p: JobPlan, timeout: float = 240) -> list[int]:
    upload(p)
    procs = [start(launch) for launch in p.launches]
    return [proc.wait(timeout=timeout) for proc in procs]


def text(path: str) -> str:
    return Path(path).read_text(errors="replace")


def test_ddp_example_under_real_torchrun(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    hostile = f"'; touch {marker} #"
    spec = make_spec(
        kind="ddp",
        program="example:ddp",
        total_steps=7,
        args=["--steps", "{steps_per_rank}", hostile],
        master_port=29000 + os.getpid() % 1000,
    )
    p = plan(spec, local_inventory(tmp_path), job_id="ddp-local")
    assert run_all(p) == [0], text(p.launches[0].log_paths[1].path)
    out = text(p.launches[0].log_paths[0].path)
    # --tee 3: every line of a worker is in torchrun's stdout, prefixed with its local rank.
    sums = dict(re.findall(r"^\[default(\d)\]:rank \d params_checksum=(\S+)$", out, re.M))
    assert set(sums) == {"0", "1"} and sums["0"] == sums["1"]
    assert "[default1]:rank 1 step 3/3 " in out  # 7 steps over 2 ranks: 3 each
    assert "\"'; touch " in out and not marker.exists()
    assert (Path(p.job_dirs["me"]) / "torchrun").is_dir()  # not the host's /tmp


@pytest.mark.mpi
def test_mpirun_forwards_env_and_writes_rank_files_where_planned(tmp_path: Path) -> None:
    if shutil.which("mpirun") is None:
        pytest.skip("Open MPI is not installed")
    code = "import os; print('rank', os.environ['OMPI_COMM_WORLD_RANK'], os.environ['FOO'])"
    spec = make_spec(
        kind="mpi", program="python3", args=["-c", code], env={"FOO": "a b'c", **RUN_AS_ROOT}
    )
    p = plan(spec, local_inventory(tmp_path), job_id="mpi-local")
    launch = p.launches[0]
    assert run_all(p) == [0], text(launch.log_paths[1].path)
    rank_files = [log for log in launch.log_paths if log.rank is not None]
    assert len(rank_files) == 4
    for log in rank_files:
        if log.stream == "stdout":
            assert f"rank {log.rank} a b'c" in text(log.path)
    # The ranks hand mpirun none of their output (issue 23): its own files hold its own
    # messages only, so no rank's line is read twice.
    assert "a b'c" not in text(launch.log_paths[0].path) + text(launch.log_paths[1].path)


@pytest.mark.horovod
def test_horovod_example_uses_the_step_share(tmp_path: Path) -> None:
    pytest.importorskip("horovod.torch")
    if not Path(VENV_BIN, "horovodrun").exists():
        pytest.skip("horovodrun is not installed")
    spec = make_spec(kind="horovod", program="example:horovod", total_steps=7)
    inv = local_inventory(tmp_path)
    # horovodrun decides from the address whether to ssh; 127.0.0.1 is this machine.
    p = plan(spec, inv, job_id="hvd-local")
    launch = p.launches[0]
    assert launch.argv[:5] == ("horovodrun", "-np", "2", "-H", "127.0.0.1:2")
    assert run_all(p) == [0], text(launch.log_paths[1].path)
    for log in launch.log_paths[2:]:
        if log.stream == "stdout":
            body = text(log.path)
            assert f"rank {log.rank} step 3/3 " in body
            assert "global_steps=6" in body  # 7 // 2 per rank, 1 dropped


def test_ps_example_workers_finish_and_ps_stops_on_term(tmp_path: Path) -> None:
    spec = make_spec(
        kind="ps",
        program="example:ps",
        ps=2,
        workers=2,
        total_steps=10,
        master_port=31000 + os.getpid() % 1000,
    )
    p = plan(spec, local_inventory(tmp_path), job_id="ps-local")
    upload(p)
    procs = {(x.role, x.index): (x, start(x)) for x in p.launches}
    for (role, _), (launch, proc) in procs.items():
        if role == "worker":
            assert proc.wait(timeout=120) == 0, text(launch.log_paths[1].path)
            assert "step 5/5" in text(launch.log_paths[0].path)
    for (role, _), (launch, proc) in procs.items():
        if role == "ps":
            assert proc.poll() is None  # a ps serves until it is told to stop
            proc.terminate()
            assert proc.wait(timeout=30) == 0
            assert "stopped after 10 updates" in text(launch.log_paths[0].path)
