"""mpirun and horovodrun jobs across real sshd hosts, started by the runner.

The launcher runs on the first host and reaches the others with ssh as their test users
(the fixture writes each user's ~/.ssh/config). Three hosts, so that the hosts other
than the launcher have different ssh ports and the plan leaves the port to that config.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from sshd_cluster import SETUP_LINE, SshdCluster

from console.inventory import load
from console.jobs.history import JobHistory
from console.jobs.models import JobPlan, JobState
from console.jobs.runner import Job, JobRunner
from console.jobs.spec import make_spec
from console.transport.pool import ClusterConnections

VENV_BIN = Path(SETUP_LINE.split()[-1]).parent
JOB_TIMEOUT_S = 120

pytestmark = [pytest.mark.sshd, pytest.mark.slow]


def _missing(program: str) -> str | None:
    if shutil.which(program) or (VENV_BIN / program).exists():
        return None
    return f"{program} is not installed here (scripts/setup-test-env.sh installs it)"


needs_mpirun = pytest.mark.skipif(_missing("mpirun") is not None, reason=str(_missing("mpirun")))
needs_horovodrun = pytest.mark.skipif(
    _missing("horovodrun") is not None, reason=str(_missing("horovodrun"))
)


@asynccontextmanager
async def runner_for(cluster: SshdCluster, tmp_path: Path) -> AsyncIterator[JobRunner]:
    inventory = load(cluster.inventory_path)
    pool = ClusterConnections(inventory)
    await pool.wait_settled()
    runner = JobRunner(pool, inventory, history=JobHistory(tmp_path / "jobs.sqlite3"), grace_s=5)
    try:
        yield runner
    finally:
        await runner.close()
        await pool.close()


def launcher_output(cluster: SshdCluster, plan: JobPlan) -> str:
    launch = plan.launches[0]
    home = cluster.host(launch.host).home
    texts = []
    for log in launch.log_paths:
        path = home / log.path.removeprefix("~/")
        if log.role != "rank" and path.exists():
            texts.append(path.read_text(errors="replace"))
    return "\n".join(texts)


def rank_output(cluster: SshdCluster, plan: JobPlan) -> dict[int, str]:
    launch = plan.launches[0]
    home = cluster.host(launch.host).home
    found = {}
    for log in launch.log_paths:
        path = home / log.path.removeprefix("~/")
        if log.role == "rank" and log.stream == "stdout" and log.rank is not None:
            found[log.rank] = path.read_text(errors="replace") if path.exists() else ""
    return found


async def finish(runner: JobRunner, job: Job, cluster: SshdCluster) -> JobState:
    """Wait for the job; on timeout stop it and fail with the launcher's output."""
    try:
        return await asyncio.wait_for(job.wait(), JOB_TIMEOUT_S)
    except TimeoutError:
        await runner.stop(job)
        pytest.fail(
            f"job did not end within {JOB_TIMEOUT_S}s; launcher output:\n"
            + launcher_output(cluster, job.plan)[-3000:]
        )


def assert_nothing_left(cluster: SshdCluster) -> None:
    deadline = time.monotonic() + 5
    for host in cluster.hosts:
        while True:
            out = subprocess.run(
                ["ps", "-u", host.user, "-o", "stat=,args="], capture_output=True, text=True
            ).stdout
            rows = [r for r in out.splitlines() if not r.strip().startswith("Z")]
            rows = [r for r in rows if "sshd:" not in r]
            if not rows or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert rows == [], f"{host.name} still runs: {rows}"


@pytest.mark.mpi
@needs_mpirun
async def test_mpirun_across_hosts(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=3)
    async with runner_for(cluster, tmp_path) as runner:
        spec = make_spec(
            kind="mpi",
            program="/bin/sh",
            gpus_per_host=1,
            args=[
                "-c",
                "echo rank=$OMPI_COMM_WORLD_RANK size=$OMPI_COMM_WORLD_SIZE user=$(id -un)",
            ],
            env={"DISTCONSOLE_TEST_VALUE": "a b'c"},
        )
        plan = await runner.prepare(spec)
        job = await runner.launch(plan)
        state = await finish(runner, job, cluster)
        output = launcher_output(cluster, plan)
        assert state is JobState.SUCCEEDED, output[-3000:]
    ranks = rank_output(cluster, plan)
    users = {}
    for rank, text in ranks.items():
        match = re.search(r"rank=(\d) size=3 user=(\S+)", text)
        assert match and int(match[1]) == rank, (rank, text, output[-2000:])
        users[rank] = match[2]
    # every rank ran on its own host, as that host's user
    assert users == {i: cluster.hosts[i].user for i in range(3)}
    assert_nothing_left(cluster)


@pytest.mark.horovod
@needs_horovodrun
async def test_horovodrun_gloo_with_step_share(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=3)
    async with runner_for(cluster, tmp_path) as runner:
        spec = make_spec(
            kind="horovod",
            program="example:horovod",
            gpus_per_host=1,
            total_steps=20,
            args=["--steps", "{steps_per_rank}"],
        )
        plan = await runner.prepare(spec)
        assert (plan.steps_per_rank, plan.steps_dropped) == (6, 2)
        job = await runner.launch(plan)
        state = await finish(runner, job, cluster)
        output = launcher_output(cluster, plan)
        assert state is JobState.SUCCEEDED, output[-3000:]
    text = output + "\n".join(rank_output(cluster, plan).values())
    for rank in range(3):
        steps = re.findall(rf"rank {rank} step (\d+)/6\b", text)
        assert steps and steps[-1] == "6", (rank, text[-2000:])
    assert_nothing_left(cluster)
