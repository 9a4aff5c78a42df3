"""Pre-flight checks what the job will really need (issue 30 item 3), on real parts.

- A bundled example's own imports: ``--kind mpi -- example:horovod`` on hosts without
  horovod is refused before anything starts (it used to pass, then every rank failed with
  ModuleNotFoundError); mpi's default program, ``example:mpi``, needs nothing beyond the
  standard library and runs there. The hosts are real sshd hosts whose Python is the
  system's (no setup line: no venv, so neither torch nor horovod).
- Busy GPUs as the sampler sees them: on the demo (simulated GPUs, which no nvidia-smi
  lists), a job launched onto a GPU that another job's rank holds is warned about.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_demo import _end, _start_serve
from tests.sshd_cluster import SshdCluster, unavailable_reason

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 180


def distconsole(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(tmp_path / "data"))
    return subprocess.run(
        [sys.executable, "-m", "console", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip


@pytest.fixture(scope="module")
def bare_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Two sshd hosts sharing one account (as an MPI cluster does), system Python."""
    reason = unavailable_reason() or (None if shutil.which("mpirun") else "no mpirun here")
    if reason is not None:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("bare-hosts")
    cluster = SshdCluster(root / "cluster", 2, shared_account=True)
    try:
        yield cluster.write_inventory(root / "hosts.yaml", setup=None, interface="lo")
    finally:
        cluster.close()


@pytest.mark.sshd
@pytest.mark.mpi
def test_mpi_with_the_horovod_example_is_refused_where_horovod_is_missing(
    bare_hosts: Path, tmp_path: Path
) -> None:
    done = distconsole(
        tmp_path, "launch", str(bare_hosts), "--kind", "mpi", "--gpus-per-host", "1",
        "--", "example:horovod",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    assert "nothing was started" in done.stderr, done.stderr[-3000:]
    for host in ("node0", "node1"):
        assert re.search(rf"FAIL \[versions\] {host}: horovod is not installed", done.stderr)
    assert "ModuleNotFoundError" not in done.stdout + done.stderr


@pytest.mark.sshd
@pytest.mark.mpi
def test_mpi_s_default_example_runs_without_horovod_or_torch(
    bare_hosts: Path, tmp_path: Path
) -> None:
    done = distconsole(
        tmp_path, "launch", str(bare_hosts), "--kind", "mpi", "--gpus-per-host", "1",
        "--total-steps", "8", "--", "example:mpi",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        # 8 steps over 2 ranks: 4 each, from DISTCONSOLE_STEPS_PER_RANK.
        assert f"rank {rank} step 4/4 loss" in done.stdout, done.stdout[-3000:]
        assert f"rank {rank} params_checksum=" in done.stdout


def test_a_gpu_another_job_holds_on_the_demo_is_warned_about(tmp_path: Path) -> None:
    server = _start_serve("--hosts", "1", "--dir", str(tmp_path / "demo"))
    holder = None
    try:
        inventory = str(server.inventory_path)
        env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(tmp_path / "data"))
        holder = subprocess.Popen(
            [sys.executable, "-m", "console", "launch", inventory, "--kind", "mpi",
             "--gpus-per-host", "1", "--", "example:mpi", "--steps", "100000", "--sleep", "0.1"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert holder.stdout is not None
        line = ""
        while " step 2/" not in line:
            ready, _, _ = select.select([holder.stdout], [], [], TIMEOUT_S)
            line = holder.stdout.readline() if ready else ""
            assert line, holder.stderr.read() if holder.stderr else "the first job never ran"
        done = distconsole(
            tmp_path, "launch", inventory, "--kind", "mpi", "--gpus-per-host", "1",
            "--", "example:mpi", "--steps", "2",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        warned = re.search(
            r"WARN \[gpu-busy\] node0: GPU 0 already used by other processes: pid \d+ "
            r"\S+ \(job mpi-\S+ rank 0",
            done.stderr,
        )
        assert warned, done.stderr[-3000:]
    finally:
        if holder is not None:
            _end(holder)  # Ctrl-C: launch stops its job on the host
        _end(server.proc)
