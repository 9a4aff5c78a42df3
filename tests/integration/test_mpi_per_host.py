"""mpirun across real sshd hosts with per-host users and homes (issue 10 part 3).

The fixture's default cluster: node0 is user dctestA with its own home and port, node1
is dctestB with another. The launcher runs on node0 as dctestA and reaches both hosts by
inventory name through dctestA's ~/.ssh/config (the fixture writes one entry per host,
as ``distconsole keys`` does). The program is ``~/report.py``, a file in EACH user's own
home, so it only runs if the path resolves on the rank's host; each rank's log is read
back from the host the rank ran on, with the real ``distconsole logs JOB --json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from sshd_cluster import CLUSTER_KNOWN_HOSTS, SshdCluster

from console.inventory import load
from console.jobs.history import JobHistory
from console.jobs.models import JobState
from console.jobs.plan.planner import plan
from console.jobs.preflight.job import preflight_job
from console.jobs.preflight.probe import PreflightReport
from console.jobs.spec import make_spec
from console.jobs.ssh.runner import JobRunner
from console.transport.pool import ClusterConnections
from tests.integration.test_secrets_horovod import SITE, with_site_env

pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.mpi]

JOB_TIMEOUT_S = 60

# One write per line (os.write): mpirun forwards a print's text and newline as two pieces.
REPORT = """\
import os, pwd
uid = os.getuid()
line = "rank=%s user=%s uid=%d home=%s cwd=%s value=%s site=%s\\n" % (
    os.environ["OMPI_COMM_WORLD_RANK"], pwd.getpwuid(uid).pw_name, uid, os.environ["HOME"],
    os.getcwd(), os.environ.get("DISTCONSOLE_TEST_VALUE"), os.environ.get("SITE_TOKEN"),
)
os.write(1, line.encode())
"""


def put_report(cluster: SshdCluster) -> None:
    for host in cluster.hosts:
        path = host.home / "report.py"
        path.write_text(REPORT)
        owner = pwd.getpwnam(host.user)
        os.chown(path, owner.pw_uid, owner.pw_gid)


@asynccontextmanager
async def runner_for(cluster: SshdCluster, data: Path) -> AsyncIterator[JobRunner]:
    inventory = load(cluster.inventory_path)
    pool = ClusterConnections(inventory)
    await pool.wait_settled()
    runner = JobRunner(pool, inventory, history=JobHistory(data / "jobs.sqlite3"), grace_s=5)
    try:
        yield runner
    finally:
        await runner.close()
        await pool.close()


def dc(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(data))
    return subprocess.run(
        [sys.executable, "-m", "console", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_mpirun_four_ranks_on_two_per_host_users_with_logs_from_each_host(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=2)
    assert cluster.hosts[0].user != cluster.hosts[1].user
    cluster.write_inventory(interface="lo")
    with_site_env(cluster.inventory_path)  # each host its own inventory value
    put_report(cluster)
    data = tmp_path / "data"
    data.mkdir()
    async with runner_for(cluster, data) as runner:
        spec = make_spec(
            kind="mpi",
            program="~/report.py",
            gpus_per_host=2,
            env={"DISTCONSOLE_TEST_VALUE": "a b'c"},
        )
        plan = await runner.prepare(spec)
        argv = plan.launches[0].argv
        # Different users and ports: hosts by inventory name, no single -p.
        assert argv[argv.index("-H") + 1] == "node0:2,node1:2"
        assert "plm_rsh_args" not in argv
        # node1's inventory value differs from the launcher's: in its 0600 file, not in
        # the rank wrapper's text (in mpirun's argv); node0's travels by -x SITE_TOKEN.
        assert SITE["node1"] not in " ".join(argv) and "SITE_TOKEN" in argv
        job = await runner.launch(plan)
        state = await asyncio.wait_for(job.wait(), JOB_TIMEOUT_S)
        assert state is JobState.SUCCEEDED, job.failure and job.failure.describe()
    # Each rank's file is on the host it ran on, in that user's own home.
    seen = {}
    for log in plan.launches[0].log_paths:
        if log.role == "rank" and log.stream == "stdout":
            assert log.host is not None and log.rank is not None
            host = cluster.host(log.host)
            text = (host.home / log.path.removeprefix("~/")).read_text()
            seen[log.rank] = (host, text)
    assert sorted(seen) == [0, 1, 2, 3]
    for rank, (host, text) in seen.items():
        expected = (
            f"rank={rank} user={host.user} uid={host.uid} home={host.home} "
            f"cwd={host.home}/distconsole value=a b'c site={SITE[host.name]}"
        )
        assert text.strip() == expected, (rank, text)
    assert [seen[r][0].name for r in range(4)] == ["node0", "node0", "node1", "node1"]

    # `distconsole logs JOB --json` reads node1's ranks from node1.
    out = dc(data, "logs", str(cluster.inventory_path), plan.job_id, "--json")
    assert out.returncode == 0, out.stderr
    lines = [json.loads(ln) for ln in out.stdout.splitlines()]
    by_rank = {
        rec["rank"]: rec
        for rec in lines
        if rec["role"] == "rank" and rec["line"].startswith("rank=")
    }
    assert sorted(by_rank) == [0, 1, 2, 3], out.stdout
    for rank, rec in by_rank.items():
        host = seen[rank][0]
        assert rec["host"] == host.name
        assert rec["line"].startswith(f"rank={rank} user={host.user} "), rec


async def preflight_of(cluster: SshdCluster) -> PreflightReport:
    inventory = load(cluster.inventory_path)
    spec = make_spec(kind="mpi", program="/bin/true", gpus_per_host=1)
    async with ClusterConnections(inventory) as pool:
        await pool.wait_settled()
        return await preflight_job(pool, spec, plan(spec, inventory), inventory)


def ssh_findings(report: PreflightReport) -> list[str]:
    return [f.line() for f in report.errors if f.check == "ssh"]


async def test_preflight_names_the_pair_the_launcher_cannot_ssh_and_the_fix(
    sshd_cluster: Callable[..., SshdCluster],
) -> None:
    cluster = sshd_cluster(n=2, peer_ssh=False)
    report = await preflight_of(cluster)
    lines = ssh_findings(report)
    # From the launcher node0, by inventory name, to both hosts (itself included).
    assert len(lines) == 2, report.describe()
    for peer in ("node0", "node1"):
        (line,) = [ln for ln in lines if f"cannot ssh to {peer} " in ln]
        assert line.startswith("FAIL [ssh] node0: "), line
        assert f"distconsole keys {cluster.inventory_path} --host node0,node1" in line
    assert "ssh between hosts" in report.checked

    # Set up, then node1's host key taken out of node0's known hosts: only that pair.
    cluster.peer_ssh = True
    for host in cluster.hosts:
        cluster._write_user_files(host)
    node0, node1 = cluster.hosts
    known = node0.home / ".ssh" / CLUSTER_KNOWN_HOSTS
    known.write_text(node0.known_hosts_line + "\n")
    (line,) = ssh_findings(await preflight_of(cluster))
    assert line.startswith("FAIL [ssh] node0: cannot ssh to node1 "), line
    assert "Host key verification failed" in line, line
    known.write_text(node0.known_hosts_line + "\n" + node1.known_hosts_line + "\n")
    assert ssh_findings(await preflight_of(cluster)) == []


# Rank 1 (node1's only rank) fails with a line of its own; rank 0 waits to be aborted.
FAIL_ON_RANK1 = """\
import os, sys, time
if os.environ["OMPI_COMM_WORLD_RANK"] == "1":
    os.write(2, b"RuntimeError: distinctive failure of rank 1 on node1\\n")
    sys.exit(3)
time.sleep(60)
"""


def test_a_rank_failing_on_the_second_host_is_the_first_error_and_names_its_rank(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    """Rank 1's stderr exists only in node1's home: the console reads it there and
    shows it as the first error; mpirun's report names rank 1 as the first to fail."""
    cluster = sshd_cluster(n=2)
    cluster.write_inventory(interface="lo")
    for host in cluster.hosts:
        path = host.home / "fail.py"
        path.write_text(FAIL_ON_RANK1)
        owner = pwd.getpwnam(host.user)
        os.chown(path, owner.pw_uid, owner.pw_gid)
    data = tmp_path / "data"
    inv = str(cluster.inventory_path)
    launched = dc(data, "launch", inv, "--kind", "mpi", "--gpus-per-host", "1", "--", "~/fail.py")
    assert launched.returncode == 1, launched.stderr
    distinctive = "RuntimeError: distinctive failure of rank 1 on node1"
    assert "(rank 1) failed: exit status" in launched.stderr, launched.stderr
    assert "first error:" in launched.stderr, launched.stderr
    cause = launched.stderr.split("first error:", 1)[1].split("last lines of its output:")[0]
    assert distinctive in cause, launched.stderr
    listed = dc(data, "jobs", inv, "--json")
    assert listed.returncode == 0, listed.stderr
    [job] = json.loads(listed.stdout)
    assert job["state"] == "failed"
    assert "(rank 1) failed" in job["failure"], job["failure"]
    assert distinctive in job["failure"].split("first error:", 1)[1], job["failure"]
    # Read on node1 itself (rank 1's stderr lives only in node1's home).
    assert f"  [node1]\n  {distinctive}" in launched.stderr, launched.stderr
    # The hosts' own record (a fresh data dir discovers it): mpirun's first failed rank.
    fresh = dc(tmp_path / "fresh", "jobs", inv, "--json")
    assert fresh.returncode == 0, fresh.stderr
    [found] = json.loads(fresh.stdout)
    assert found["state"] == "failed" and "(rank 1) failed" in found["failure"], found
