"""mpirun and horovodrun jobs across real sshd hosts, started by the runner.

The cluster is the fixture's ``shared_account`` one, as a real MPI cluster is: one
account and one (shared, "NFS") home on every host, every sshd on the same port number
at its own 127.0.0.x address with its own host key. The launcher runs on the first host
and reaches every host, its own address included (Open MPI and Horovod take no 127.0.0.x
but 127.0.0.1 for themselves), with real ssh and the ``-p`` the plan gives; that user's
~/.ssh/config (written by the fixture) supplies the key and known_hosts. Everything is
on loopback, so the interface is ``lo``.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from sshd_cluster import SETUP_LINE, SshdCluster

from console.inventory import load
from console.jobs.history import JobHistory
from console.jobs.models import JobPlan, JobState
from console.jobs.spec import make_spec
from console.jobs.ssh.runner import Job, JobRunner
from console.transport.pool import ClusterConnections

VENV_BIN = Path(SETUP_LINE.split()[-1]).parent
JOB_TIMEOUT_S = 50  # each job takes a few seconds; a hang is stopped and reported

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
    """No process of the test user(s) is left on any host but sshd's own."""
    deadline = time.monotonic() + 5
    for user in sorted({host.user for host in cluster.hosts}):
        while True:
            out = subprocess.run(
                ["ps", "-u", user, "-o", "stat=,args="], capture_output=True, text=True
            ).stdout
            rows = [r for r in out.splitlines() if not r.strip().startswith("Z")]
            rows = [r for r in rows if "sshd:" not in r]
            if not rows or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert rows == [], f"{user} still runs: {rows}"


def ssh_logins(cluster: SshdCluster) -> dict[str, int]:
    """Sessions each host's sshd accepted (its log), the console's own included."""
    return {
        h.name: h.log_path.read_text(errors="replace").count("Accepted publickey")
        for h in cluster.hosts
    }


async def wait_for_output(cluster: SshdCluster, plan: JobPlan, marker: str) -> None:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not all(marker in text for text in rank_output(cluster, plan).values()):
        if time.monotonic() > deadline:
            pytest.fail(f"not every rank printed {marker!r}: {rank_output(cluster, plan)}")
        await asyncio.sleep(0.2)


def shared_cluster(make: Callable[..., SshdCluster], n: int) -> SshdCluster:
    cluster = make(n=n, shared_account=True)
    # Every host on the loopback interface: ranks and daemons talk over lo.
    cluster.write_inventory(interface="lo")
    return cluster


# Each rank prints its rank, the world size, the forwarded value, and the server end of
# the ssh connection its Open MPI daemon came in by: the host the rank runs on.
RANK_REPORT = (
    "echo rank=$OMPI_COMM_WORLD_RANK size=$OMPI_COMM_WORLD_SIZE "
    'ssh="$SSH_CONNECTION" value="$DISTCONSOLE_TEST_VALUE"'
)


@pytest.mark.mpi
@needs_mpirun
@pytest.mark.parametrize("n", [3, 2])
async def test_mpirun_across_hosts(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path, n: int
) -> None:
    cluster = shared_cluster(sshd_cluster, n)
    async with runner_for(cluster, tmp_path) as runner:
        spec = make_spec(
            kind="mpi",
            program="/bin/sh",
            gpus_per_host=1,
            args=["-c", RANK_REPORT],
            env={"DISTCONSOLE_TEST_VALUE": "a b'c"},
        )
        plan = await runner.prepare(spec)
        argv = plan.launches[0].argv
        # One port on every host: the plan passes it to every ssh mpirun starts.
        assert argv[argv.index("plm_rsh_args") + 1] == f"-p {cluster.hosts[0].port}"
        assert argv[argv.index("btl_tcp_if_include") + 1] == "lo"
        job = await runner.launch(plan)
        state = await finish(runner, job, cluster)
        output = launcher_output(cluster, plan)
        assert state is JobState.SUCCEEDED, output[-3000:]
    ranks = rank_output(cluster, plan)
    assert sorted(ranks) == list(range(n))
    hosts = {}
    for rank, text in ranks.items():
        match = re.search(rf"rank=(\d) size={n} ssh=\S+ \d+ (\S+ \d+) value=(.*)", text)
        assert match and int(match[1]) == rank, (rank, text, output[-2000:])
        assert match[3] == "a b'c", text  # forwarded with -x, quoting intact
        hosts[rank] = match[2]
    # Every rank ran under its own host's sshd, the launcher's included (mpirun ssh'd
    # to its own 127.0.0.x address with the same -p).
    assert hosts == {i: f"{cluster.hosts[i].address} {cluster.hosts[i].port}" for i in range(n)}
    assert_nothing_left(cluster)


@pytest.mark.horovod
@needs_horovodrun
async def test_horovodrun_gloo_with_step_share(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = shared_cluster(sshd_cluster, 3)
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
        argv = plan.launches[0].argv
        assert argv[argv.index("-p") + 1] == str(cluster.hosts[0].port)
        assert argv[argv.index("--network-interface") + 1] == "lo"
        job = await runner.launch(plan)
        state = await finish(runner, job, cluster)
        output = launcher_output(cluster, plan)
        assert state is JobState.SUCCEEDED, output[-3000:]
    text = "\n".join(rank_output(cluster, plan).values())
    # Each rank's lines are in its own file only: horovodrun's output holds none of them
    # (issue 23: it echoed them all, so every line showed twice).
    assert "params_checksum" not in output and " step " not in output, output[-2000:]
    for rank in range(3):
        steps = re.findall(rf"rank {rank} step (\d+)/6\b", text)
        assert steps and steps[-1] == "6", (rank, text[-2000:])
    # The ranks trained together (allreduce): one parameter checksum everywhere.
    checksums = set(re.findall(r"params_checksum=(\S+)", text))
    assert len(checksums) == 1, checksums
    # horovodrun reached every host, its own address included, by ssh: more sessions
    # than the console's one connection per host.
    assert all(count >= 2 for count in ssh_logins(cluster).values()), ssh_logins(cluster)
    assert_nothing_left(cluster)


@pytest.mark.mpi
@needs_mpirun
async def test_mpirun_stop_leaves_nothing_on_any_host(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    """Ranks that would run for ten minutes (on hosts the console started nothing on
    itself) are gone after a stop: the launcher's group and every marked rank."""
    cluster = shared_cluster(sshd_cluster, 3)
    async with runner_for(cluster, tmp_path) as runner:
        spec = make_spec(
            kind="mpi",
            program="/bin/sh",
            gpus_per_host=1,
            args=["-c", "echo started; exec sleep 600"],
        )
        plan = await runner.prepare(spec)
        job = await runner.launch(plan)
        await wait_for_output(cluster, plan, "started")
        for host in cluster.hosts:  # each rank sleeps under its own host's sshd
            sleeping = [p for p in cluster.processes_of(host.name) if p.name() == "sleep"]
            assert len(sleeping) == 1, (host.name, sleeping)
        report = await runner.stop(job, grace_s=5)
        assert report.clean, report.describe()
        assert job.state is JobState.STOPPED
    assert_nothing_left(cluster)


@pytest.mark.mpi
@needs_mpirun
async def test_mpirun_host_lost_fails_and_stops_the_rest(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    """One host of a shared-account cluster goes away mid-run: only its sessions die
    (the fixture's per-host stop), mpirun notices, and the job fails with everything
    stopped on the hosts that remain."""
    cluster = shared_cluster(sshd_cluster, 3)
    async with runner_for(cluster, tmp_path) as runner:
        spec = make_spec(
            kind="mpi",
            program="/bin/sh",
            gpus_per_host=1,
            args=["-c", "echo started; exec sleep 600"],
        )
        plan = await runner.prepare(spec)
        job = await runner.launch(plan)
        await wait_for_output(cluster, plan, "started")
        cluster.stop("node2")
        assert cluster.processes_of("node2") == []
        # The other hosts' ranks were not touched by taking node2 away.
        for name in ("node0", "node1"):
            assert any(p.name() == "sleep" for p in cluster.processes_of(name)), name
        state = await finish(runner, job, cluster)
        assert state is JobState.FAILED, state
        assert job.failure is not None
        # mpirun itself ends (its ssh to node2 names the host), and the job fails fast.
        assert job.failure.process == "launcher-0" and job.failure.exit_status != 0
        lost = f"Connection to {cluster.host('node2').address} closed"
        assert lost in launcher_output(cluster, plan)
        # The launcher host's supervisor stops what is left (the console stops nothing
        # while a supervisor runs, so there is no console stop report): nothing remains
        # on the hosts that stayed, checked below.
    assert_nothing_left(cluster)
