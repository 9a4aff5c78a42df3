"""A failed MPI job's last lines come from the host where each rank ran (issue 10 part 3),
over real sshd hosts with per-host users and homes: rank 1's stderr exists only in
node1's home, so read on the launcher's host (as before) it was missing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from sshd_cluster import SshdCluster

from console.inventory import load
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.jobs.ssh import remote_ops
from console.jobs.ssh.failure_tail import read_failure_tail
from console.transport.pool import ClusterConnections

pytestmark = [pytest.mark.sshd]

LAUNCHER_STDERR = """\
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
"""
RANK1_STDERR = """\
Traceback (most recent call last):
  File "train.py", line 3, in <module>
RuntimeError: boom on node1
rank 1 leaves with status 1
"""


def put(home: Path, path: str, text: str) -> None:
    target = home / path.removeprefix("~/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    for parent in [target, *target.parents]:
        if parent == home:
            break
        parent.chmod(0o755 if parent.is_dir() else 0o644)


async def test_each_ranks_last_lines_are_read_on_its_own_host(
    sshd_cluster: Callable[..., SshdCluster],
) -> None:
    cluster = sshd_cluster(n=2)
    inventory = load(cluster.inventory_path)
    planned = plan(make_spec(kind="mpi", program="train.py", gpus_per_host=1), inventory,
                   job_id="tail-1")  # fmt: skip
    launch = planned.launches[0]
    job_dir = remote_ops.host_job_dir(planned, launch.host)
    by_host = remote_ops.tail_paths_by_host(launch, job_dir)
    assert sorted(by_host) == ["node0", "node1"]
    [rank1_stderr] = by_host["node1"]
    put(cluster.host("node0").home, by_host["node0"][0], LAUNCHER_STDERR)
    put(cluster.host("node1").home, rank1_stderr, RANK1_STDERR)
    assert not (cluster.host("node0").home / rank1_stderr.removeprefix("~/")).exists()

    pool = ClusterConnections(inventory)
    await pool.wait_settled()
    try:
        read = await read_failure_tail(
            lambda host: pool[host], by_host, launch.host, lines=15, searched=400
        )
        # With only the last line of each file shown, the cause is searched on node1 too.
        short = await read_failure_tail(
            lambda host: pool[host], by_host, launch.host, lines=1, searched=400
        )
    finally:
        await pool.close()
    assert "  Primary job  terminated normally, but 1 process returned" in read.tail
    at = read.tail.index("  [node1]")
    assert read.tail[at + 1 :] == tuple(f"  {line}" for line in RANK1_STDERR.splitlines())
    # node1's lines follow the launcher's report in the tail: the cause still names them.
    assert any("RuntimeError: boom on node1" in line for line in read.cause), read.cause
    assert short.tail[-2:] == ("  [node1]", "  rank 1 leaves with status 1")
    assert any("RuntimeError: boom on node1" in line for line in short.cause), short.cause
