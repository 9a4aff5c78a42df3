"""Job runner over real sshd hosts with real torchrun (gloo, CPU) and real processes.

Every test checks the hosts afterwards with ``ps`` as each host's user: nothing of the
job may remain (zombies are dead processes the machine's init has not reaped yet, and
the sshd sessions are the console's own connection).
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from sshd_cluster import SshdCluster, SshdHost

from console.errors import JobError
from console.inventory import load
from console.jobs.history import JobHistory
from console.jobs.models import JobPlan, JobState
from console.jobs.spec import make_spec
from console.jobs.ssh.runner import JobRunner
from console.transport.base import HostState
from console.transport.pool import ClusterConnections

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

JOB_TIMEOUT_S = 180


@asynccontextmanager
async def runner_for(
    cluster: SshdCluster, tmp_path: Path, grace_s: float = 5.0
) -> AsyncIterator[JobRunner]:
    inventory = load(cluster.inventory_path)
    pool = ClusterConnections(inventory)
    await pool.wait_settled()
    runner = JobRunner(
        pool, inventory, history=JobHistory(tmp_path / "jobs.sqlite3"), grace_s=grace_s
    )
    try:
        yield runner
    finally:
        await runner.close()
        await pool.close()


def on_host(host: SshdHost, path: str) -> Path:
    """A plan path (``~/...``) as seen from this machine."""
    assert path.startswith("~/"), path
    return host.home / path[2:]


def job_processes(host: SshdHost) -> list[str]:
    """The host user's live processes, minus the sshd sessions of the console itself."""
    out = subprocess.run(
        ["ps", "-u", host.user, "-o", "pid=,stat=,args="], capture_output=True, text=True
    ).stdout
    rows = []
    for line in out.splitlines():
        _pid, stat, args = line.split(None, 2)
        if stat.startswith("Z") or args.startswith("sshd:"):
            continue
        rows.append(line.strip())
    return rows


def assert_nothing_left(cluster: SshdCluster, hosts: list[str] | None = None) -> None:
    """No process on the hosts; the console's own watcher gets a moment to see its
    channel closed (it checks every 0.2 s)."""
    chosen = [cluster.host(n) for n in hosts] if hosts else cluster.hosts
    deadline = time.monotonic() + 3
    for host in chosen:
        while job_processes(host) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert job_processes(host) == [], f"{host.name} still runs processes of the job"


def read_output(cluster: SshdCluster, plan: JobPlan) -> dict[str, str]:
    """Each host's torchrun stdout (``--tee 3`` copies every local rank there)."""
    texts = {}
    for launch in plan.launches:
        host = cluster.host(launch.host)
        out = next(f for f in launch.log_paths if f.stream == "stdout" and f.role != "rank")
        texts[launch.host] = on_host(host, out.path).read_text()
    return texts


async def wait_for_text(path: Path, pattern: str, timeout: float = 120) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if path.exists() and re.search(pattern, path.read_text(errors="replace")):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{pattern!r} did not appear in {path} within {timeout}s")


async def test_ddp_two_hosts_ranks_agree_and_logs_per_rank(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    async with runner_for(cluster, tmp_path) as runner:
        spec = make_spec(kind="ddp", program="example:ddp", gpus_per_host=2, args=["--steps", "4"])
        plan = await runner.prepare(spec)
        job = await runner.launch(plan)
        assert job.state is JobState.RUNNING
        assert all(p.pgid for p in job.processes.values())
        state = await asyncio.wait_for(job.wait(), JOB_TIMEOUT_S)
        assert state is JobState.SUCCEEDED, job.failure and job.failure.describe()
        record = runner.history.get(job.id) if runner.history else None
        assert record is not None and record.state is JobState.SUCCEEDED

    texts = read_output(cluster, plan)
    checksums = re.findall(r"rank (\d) params_checksum=(\S+)", "\n".join(texts.values()))
    assert sorted(r for r, _ in checksums) == ["0", "1", "2", "3"]
    assert len({c for _, c in checksums}) == 1, f"ranks disagree: {checksums}"
    for launch in plan.launches:
        host = cluster.host(launch.host)
        job_dir = on_host(host, plan.job_dirs[launch.host])
        assert (job_dir / f"torchrun-{launch.index}.exit").read_text().strip() == "0"
        # torchrun's own per-worker files (--log-dir) exist for both local ranks
        rank_files = sorted(job_dir.glob("torchrun/**/stdout.log"))
        assert len(rank_files) == 2, rank_files
        for f in rank_files:
            assert "params_checksum=" in f.read_text()
    assert_nothing_left(cluster)


async def test_crashing_rank_fails_job_and_leaves_nothing(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    async with runner_for(cluster, tmp_path) as runner:
        args = ["--steps", "400", "--sleep", "0.05", "--crash-rank", "1", "--crash-at-step", "3"]
        spec = make_spec(kind="ddp", program="example:ddp", gpus_per_host=1, args=args)
        job = await runner.launch(await runner.prepare(spec))
        state = await asyncio.wait_for(job.wait(), JOB_TIMEOUT_S)
        assert state is JobState.FAILED
        failure = job.failure
        assert failure is not None
        # rank 1 is node1's only rank. When gloo aborts rank 0 for it and node0's torchrun
        # ends first, that failure says it lost its peer: the policy names the crash.
        assert failure.host == "node1", failure.describe()
        assert failure.process == "torchrun-1"
        assert failure.ranks == (1,)
        assert failure.exit_status not in (None, 0)
        assert any("exit" in line.lower() or "error" in line.lower() for line in failure.tail)
    assert_nothing_left(cluster)


async def test_stop_during_training_leaves_nothing(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    async with runner_for(cluster, tmp_path, grace_s=5) as runner:
        args = ["--steps", "100000", "--sleep", "0.05"]
        spec = make_spec(kind="ddp", program="example:ddp", gpus_per_host=1, args=args)
        plan = await runner.prepare(spec)
        job = await runner.launch(plan)
        node1 = cluster.host("node1")
        out = on_host(node1, plan.job_dirs["node1"] + "/torchrun-1.out")
        await wait_for_text(out, r"rank 1 step 3/")
        assert job_processes(node1), "training should be running on node1"
        report = await runner.stop(job)
        assert report.clean, report.describe()
        assert job.state is JobState.STOPPED
    assert_nothing_left(cluster)


async def test_hostile_argument_and_env_reach_the_program_literally(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    marker = Path(f"/tmp/distconsole-injected-{uuid.uuid4().hex}")
    hostile = f"'; touch {marker} #"
    env_value = f'$(touch {marker}) "quoted" `x` \\ ~/not-home'
    async with runner_for(cluster, tmp_path) as runner:
        spec = make_spec(
            kind="ddp",
            program="example:ddp",
            gpus_per_host=1,
            args=["--steps", "1", hostile, "two words"],
            env={"DISTCONSOLE_TEST_VALUE": env_value},
        )
        plan = await runner.prepare(spec)
        job = await runner.launch(plan)
        assert await asyncio.wait_for(job.wait(), JOB_TIMEOUT_S) is JobState.SUCCEEDED
        texts = read_output(cluster, plan)
        found = re.findall(r"extra_args=(\[.*\])", texts["node0"])
        assert found and json.loads(found[0]) == [hostile, "two words"]

        env_spec = make_spec(
            kind="ddp",
            program="printenv",
            gpus_per_host=1,
            args=["DISTCONSOLE_TEST_VALUE"],
            env={"DISTCONSOLE_TEST_VALUE": env_value},
        )
        env_plan = await runner.prepare(env_spec)
        env_job = await runner.launch(env_plan)
        assert await asyncio.wait_for(env_job.wait(), JOB_TIMEOUT_S) is JobState.SUCCEEDED
        printed = read_output(cluster, env_plan)["node1"]
        assert env_value in printed
    assert not marker.exists(), "a value reached a shell unquoted"
    assert_nothing_left(cluster)


async def test_job_with_a_host_down_is_refused_before_anything_runs(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    async with runner_for(cluster, tmp_path) as runner:
        spec = make_spec(kind="ddp", program="example:ddp", gpus_per_host=1, master_port=29731)
        plan = await runner.prepare(spec)
        cluster.stop("node1")
        conn = runner.connections["node1"]
        for _ in range(100):
            if conn.status.state is not HostState.UP:
                break
            await asyncio.sleep(0.1)
        with pytest.raises(JobError, match="node1 is "):
            await runner.launch(plan)
        assert runner.history is not None and runner.history.records() == []
    node0 = cluster.host("node0")
    assert not on_host(node0, plan.job_dirs["node0"]).exists(), "node0 started half a job"
    assert_nothing_left(cluster, ["node0"])


async def test_ps_job_stops_ps_tasks_when_workers_finish(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    async with runner_for(cluster, tmp_path) as runner:
        spec = make_spec(kind="ps", program="example:ps", ps=1, workers=2, args=["--steps", "5"])
        plan = await runner.prepare(spec)
        job = await runner.launch(plan)
        state = await asyncio.wait_for(job.wait(), JOB_TIMEOUT_S)
        assert state is JobState.SUCCEEDED, job.failure and job.failure.describe()
        workers = [p for p in job.processes.values() if p.launch.role == "worker"]
        ps = [p for p in job.processes.values() if p.launch.role == "ps"]
        assert len(workers) == 2 and all(p.exit_status == 0 for p in workers)
        # the ps task never exits by itself: the supervisor stopped it (the example
        # exits 0 on SIGTERM) once both workers had succeeded
        assert len(ps) == 1 and ps[0].ended
        node = cluster.host(ps[0].host)
        assert on_host(node, plan.job_dirs[node.name] + "/ps-0.exit").exists()
    assert_nothing_left(cluster)


async def test_host_lost_mid_job_is_a_state_and_the_rest_is_stopped(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    async with runner_for(cluster, tmp_path, grace_s=3) as runner:
        spec = make_spec(kind="ps", program="sleep", ps=1, workers=1, args=["300"])
        job = await runner.launch(await runner.prepare(spec))
        cluster.stop("node1")
        state = await asyncio.wait_for(job.wait(), 60)
        # The supervisors noticed node1's silence, stopped node0's task, failed the job.
        assert state is JobState.FAILED
        assert job.failure is not None and "node1: connection lost" in job.failure.describe()
        assert "node1" in job.lost_hosts
    assert_nothing_left(cluster, ["node0"])
