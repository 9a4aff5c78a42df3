"""The demo as a small real cluster: every job kind, run by `distconsole launch`.

`distconsole demo --serve` runs as a real subprocess; its hosts are in-process SSH
servers on 127.42.0.x running real bash. `distconsole launch` is a second real process;
mpirun and horovodrun on node0 reach the other hosts with OpenSSH's ssh client through
the demo's own ~/.ssh files, host keys checked.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.commands.parts.demo_job import demo_spec
from console.inventory import load
from console.jobs.history import JobHistory
from console.jobs.models import JobState
from console.jobs.ssh.runner import JobRunner
from console.transport.demo import DemoCluster
from console.transport.pool import ClusterConnections
from tests.integration.test_demo import REPO, Served, _end, _start_serve

JOB_TIMEOUT_S = 240


HWLOC_CRASH = "libhwloc.so"  # in the backtrace an orted prints when it segfaults there


@pytest.fixture(scope="module")
def demo4() -> Iterator[Served]:
    server = _start_serve("--hosts", "4")
    yield server
    _end(server.proc)


def launch(
    served: Served, tmp_path: Path, *argv: str, timeout: float = JOB_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(tmp_path / "data"))
    return subprocess.run(
        [sys.executable, "-m", "console", "launch", str(served.inventory_path), *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def node_home(served: Served, name: str) -> Path:
    return served.inventory_path.parent / name / "home"


def run_on(served: Served, name: str, command: str) -> subprocess.CompletedProcess[str]:
    """A command on a demo host, reached as mpirun reaches it: OpenSSH's ssh."""
    config = node_home(served, name) / ".ssh" / "config"
    return subprocess.run(
        ["ssh", "-F", str(config), name, command],
        capture_output=True,
        text=True,
        timeout=60,
    )


needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")
needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI not installed")


@needs_ssh
def test_every_host_reaches_every_other_by_openssh_with_keys_checked(demo4: Served) -> None:
    hosts = demo4.inventory.hosts
    # From node0's shell, the demo's ssh (first on PATH) logs in to each peer by name
    # and by address; the far end says which host it is and which address it serves.
    hops = "; ".join(
        f"ssh {shlex.quote(target)} 'echo $DISTCONSOLE_DEMO_HOST $SSH_CONNECTION'"
        for target in ("node1", hosts[2].address, hosts[3].address, "node0")
    )
    result = run_on(demo4, "node0", hops)
    assert result.returncode == 0, result.stderr
    seen = [line.split() for line in result.stdout.splitlines()]
    port = str(hosts[0].port)
    assert [(s[0], s[3], s[4]) for s in seen] == [
        ("node1", hosts[1].address, port),
        ("node2", hosts[2].address, port),
        ("node3", hosts[3].address, port),
        ("node0", hosts[0].address, port),
    ]
    # A host key nobody listed is refused (strict checking), not trusted on first use.
    refused = run_on(
        demo4, "node1", "ssh -o UserKnownHostsFile=/dev/null node2 true; echo status=$?"
    )
    assert "status=255" in refused.stdout, refused
    assert "Host key verification failed" in refused.stderr


@pytest.mark.mpi
@needs_ssh
@needs_mpirun
def test_mpi_gives_8_ranks_on_4_distinct_hosts(demo4: Served, tmp_path: Path) -> None:
    program = (
        'echo "rank=$OMPI_COMM_WORLD_RANK host=$DISTCONSOLE_DEMO_HOST '
        'addr=${SSH_CONNECTION##* 127.}"'
    )
    argv = ("--kind", "mpi", "--gpus-per-host", "2", "--", "sh", "-c", program)
    result = launch(demo4, tmp_path, *argv)
    if result.returncode != 0 and HWLOC_CRASH in result.stderr:
        # Open MPI's own orted sometimes dies in hwloc's topology code on this machine
        # when the whole suite runs (never alone): one retry, only for that signature.
        result = launch(demo4, tmp_path, *argv)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"job \S+ succeeded", result.stderr)
    ranks = dict(re.findall(r"rank=(\d+) host=(node\d)", result.stdout))
    assert sorted(map(int, ranks)) == list(range(8)), result.stdout
    assert {r: ranks[str(r)] for r in range(8)} == {r: f"node{r // 2}" for r in range(8)}
    # Each host's ranks came in by its own address (4 distinct hosts, not 1 with 4 ports).
    addresses = set(re.findall(r"addr=(\S+)", result.stdout))
    assert len(addresses) == 4, result.stdout


def test_ps_example_succeeds(demo4: Served, tmp_path: Path) -> None:
    result = launch(demo4, tmp_path, "--kind", "ps", "--total-steps", "40", "--", "example:ps")
    assert result.returncode == 0, result.stderr[-3000:]
    for worker in range(4):
        assert f"worker {worker} done" in result.stdout
    # The ps task served workers on other hosts, by their own addresses.
    assert re.search(r'"ps": \["127\.42\.0\.1:\d+"\]', result.stdout), result.stdout


def test_ddp_example_succeeds_across_hosts(demo4: Served, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    result = launch(
        demo4,
        tmp_path,
        "--kind",
        "ddp",
        "--gpus-per-host",
        "1",
        "--total-steps",
        "40",
        "--",
        "example:ddp",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    checksums = set(re.findall(r"params_checksum=(\S+)", result.stdout))
    assert len(checksums) == 1, result.stdout[-2000:]
    assert {h for h in re.findall(r"\[(node\d) r\d\]", result.stdout)} == {
        "node0",
        "node1",
        "node2",
        "node3",
    }


@pytest.mark.horovod
@needs_ssh
def test_horovod_example_runs_across_hosts(demo4: Served, tmp_path: Path) -> None:
    if shutil.which("horovodrun", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("horovod is not installed in this Python")
    result = launch(
        demo4,
        tmp_path,
        "--kind",
        "horovod",
        "--gpus-per-host",
        "1",
        "--total-steps",
        "40",
        "--",
        "example:horovod",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    checksums = set(re.findall(r"params_checksum=(\S+)", result.stdout))
    assert len(checksums) == 1, result.stdout[-2000:]
    assert sorted(set(re.findall(r"rank (\d) global_steps=40", result.stdout))) == [
        "0",
        "1",
        "2",
        "3",
    ]


@pytest.mark.parametrize("torch_available", [True, False])
async def test_the_demos_own_job_trains(
    torch_available: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job `distconsole demo` opens with: DDP, or the PS example (standard library
    only) where torch is missing; a few steps of it, un-paced, end in success."""
    if torch_available:
        pytest.importorskip("torch")
    monkeypatch.setenv("DISTCONSOLE_DATA_DIR", str(tmp_path / "data"))
    async with DemoCluster(2) as cluster:
        inventory = load(cluster.inventory_path)
        spec = demo_spec(("node0", "node1"), torch_available=torch_available)
        assert spec.program == ("example:ddp" if torch_available else "example:ps")
        quick = spec.model_copy(update={"total_steps": 8, "args": ()})
        async with ClusterConnections(inventory) as pool:
            await pool.wait_settled()
            runner = JobRunner(pool, inventory, history=JobHistory())
            job = await runner.launch(await runner.prepare(quick))
            await asyncio.wait_for(job.wait(), JOB_TIMEOUT_S)
        assert job.state is JobState.SUCCEEDED, job.failure
