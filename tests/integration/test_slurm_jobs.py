"""``--scheduler slurm`` against a real Slurm cluster (tests/slurm_cluster.py: munged,
slurmctld, slurmd n1 and n2) whose login host is a real sshd test host: the CLI submits
with sbatch over SSH, reads squeue --json and the jobcomp record, follows every task's
output file, and stops with scancel. The job program is the project's DDP example
(torchrun, gloo on CPUs)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))

from slurm_cluster import SlurmCluster, unavailable_reason
from sshd_cluster import SETUP_LINE, SshdCluster
from sshd_cluster import unavailable_reason as sshd_unavailable

from console.inventory import load as load_inventory
from console.jobs.history import JobHistory
from console.jobs.slurm.store import SlurmStore
from console.jobs.spec import make_spec
from console.transport.pool import ClusterConnections
from console.ui.jobs_service import JobsService

CLI = [sys.executable, "-m", "console"]
TIMEOUT_S = 180.0


class Env:
    def __init__(self, slurm: SlurmCluster, sshd: SshdCluster, data: Path) -> None:
        self.slurm = slurm
        self.sshd = sshd
        self.data = data
        self.inventory = sshd.write_inventory(
            setup=f"{SETUP_LINE} && {slurm.setup_line}", interface="lo"
        )
        with self.inventory.open("a") as f:
            f.write(f"slurm:\n  login: {sshd.hosts[0].name}\n  partition: test\n")

    def run(self, *args: str, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CLI, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )

    @property
    def env(self) -> dict[str, str]:
        return dict(os.environ, DISTCONSOLE_DATA_DIR=str(self.data))

    def launch(
        self, *options: str, program: tuple[str, ...], kind: str = "ddp", port: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """``launch --scheduler slurm``; ``port=False``: no --master-port (the script
        derives one from the Slurm job id)."""
        ports = ("--master-port", str(free_port())) if port else ()
        return self.run(
            "launch", str(self.inventory), "--scheduler", "slurm", "--kind", kind,
            *ports, *options, "--", *program,
        )  # fmt: skip

    def job(self, job_id: str) -> dict[str, Any]:
        done = self.run("jobs", str(self.inventory), "--json")
        assert done.returncode == 0, done.stderr
        return next(j for j in json.loads(done.stdout) if j["id"] == job_id)

    def wait_for(self, job_id: str, pattern: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if re.search(pattern, job.get("slurm", "")):
                return job
            assert time.monotonic() < deadline, f"{job_id} never matched {pattern!r}: {job}"
            time.sleep(0.5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def slurm_id(job: dict[str, Any]) -> str:
    found = re.match(r"slurm (\d+) ", job["slurm"])
    assert found, job
    return found.group(1)


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """One Slurm cluster and one sshd login host for every test of this module."""
    reason = unavailable_reason() or sshd_unavailable()
    if reason is not None:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("slurm")
    cluster = SlurmCluster()
    try:
        sshd = SshdCluster(root / "sshd", 1)
        try:
            yield Env(cluster, sshd, root / "data")
        finally:
            sshd.close()
    finally:
        cluster.close()


def submitted(done: subprocess.CompletedProcess[str]) -> str:
    found = re.search(r"job (\S+) submitted", done.stderr)
    assert found, done.stderr
    return found.group(1)


def checksums(stdout: str) -> dict[str, str]:
    """``[r0] rank 0 params_checksum=X`` lines: label -> X."""
    return dict(re.findall(r"^\[(r\d)\] rank \d params_checksum=(\S+)$", stdout, re.M))


def test_ddp_on_two_nodes_completes(slurm: Env, tmp_path: Path) -> None:
    # No --master-port: the rendezvous port comes from the Slurm job id.
    done = slurm.launch(
        "--nodes", "2", "--gpus-per-host", "1", program=("example:ddp",), port=False
    )
    assert done.returncode == 0, done.stderr
    job_id = submitted(done)
    job = slurm.job(job_id)
    assert job["state"] == "succeeded"
    assert re.match(r"slurm \d+ COMPLETED on n\[1-2\]", job["slurm"]), job
    # each node's torchrun wrote its own task file, followed on the login host; its
    # workers' lines carry their global rank
    sums = checksums(done.stdout)
    assert sorted(sums) == ["r0", "r1"] and len(set(sums.values())) == 1, done.stdout
    logs = slurm.run("logs", str(slurm.inventory), job_id, "--json")
    assert logs.returncode == 0, logs.stderr
    lines = [json.loads(line) for line in logs.stdout.splitlines()]
    ranked = [line for line in lines if line["rank"] is not None]
    words = {(line["rank"], line["line"].split()[2]) for line in ranked}
    assert {(0, "params_checksum=" + sums["r0"]), (1, "params_checksum=" + sums["r1"])} <= words
    assert all(line["rank"] == int(line["line"].split()[1]) for line in ranked)
    # each task's lines name the node that ran it: one node per rank, the two differ
    hosts = {rank: {line["host"] for line in ranked if line["rank"] == rank} for rank in (0, 1)}
    assert sorted(h for found in hosts.values() for h in found) == ["n1", "n2"], hosts
    # report: the login host's job directory (script, every task's output) and Slurm's record
    out = tmp_path / "report"
    report = slurm.run("report", str(slurm.inventory), job_id, "--out", str(out))
    assert report.returncode == 0, report.stderr
    sid = slurm_id(job)
    assert f"scheduler: slurm job {sid}, submitted on node0" in report.stdout, report.stdout
    assert "tasks: task 0 on n1, task 1 on n2" in report.stdout, report.stdout
    login_dir = out / "hosts" / "node0"
    assert "srun " in (login_dir / "job.sbatch").read_text()
    # Each task's file holds one rank's lines; which rank a task gets is the order the
    # nodes joined torchrun's c10d rendezvous (not the task number), so the two files
    # together hold ranks 0 and 1, one each.
    texts = [(login_dir / f"task-{t}.out").read_text() for t in (0, 1)]
    held = [{r for r in (0, 1) if f"rank {r} params_checksum=" in text} for text in texts]
    assert sorted(held, key=sorted) == [{0}, {1}], held
    record = (out / "slurm.txt").read_text()
    assert f"JobId={sid} " in record and "JobState=COMPLETED" in record, record


def test_horovod_over_srun_mpi_pmix(slurm: Env) -> None:
    """MPI ranks started by srun --mpi=pmix (Open MPI's PMIx), one per node: Horovod's
    MPI controller allreduces across both nodes."""
    done = slurm.launch(
        "--nodes", "2", "--gpus-per-host", "1",
        program=("example:horovod", "--steps", "3"), kind="horovod",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # per-rank task files: each line is its rank's (r0 from task 0, r1 from task 1)
    assert re.search(r"^\[r0\] rank 0 size 2 ", done.stdout, re.M), done.stdout
    assert re.search(r"^\[r1\] rank 1 size 2 ", done.stdout, re.M), done.stdout
    sums = checksums(done.stdout)
    assert sorted(sums) == ["r0", "r1"] and len(set(sums.values())) == 1, done.stdout
    assert slurm.job(submitted(done))["state"] == "succeeded"


def test_ps_roles_from_procid_and_ps_stopped(slurm: Env) -> None:
    """ps 0 and two workers over both nodes with TF_CONFIG from the node list; the ps
    step is stopped once the workers are done and the job completes."""
    done = slurm.launch(
        "--nodes", "2", "--gpus-per-host", "1", "--ps", "1", "--workers", "2",
        program=("example:ps", "--steps", "5"), kind="ps",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = slurm.job(submitted(done))
    assert job["state"] == "succeeded", job
    for who in ("worker0", "worker1"):
        assert f"[{who}] {who[:-1]} {who[-1]} done" in done.stdout, done.stdout
    cluster = re.search(r"^\[ps0\] ps 0 cluster (\{.*\}) ", done.stdout, re.M)
    assert cluster, done.stdout
    addresses = json.loads(cluster.group(1))
    assert addresses["ps"][0].startswith("127.0.0.41:")
    assert [a.split(":")[0] for a in addresses["worker"]] == ["127.0.0.41", "127.0.0.42"]
    assert slurm.slurm.job_processes(slurm_id(job)) == []


def test_failed_task_is_named(slurm: Env) -> None:
    done = slurm.launch(
        "--nodes", "2", program=("example:ddp", "--crash-rank", "1", "--crash-at-step", "2")
    )
    assert done.returncode == 1, done.stderr
    # rank 1 crashes; srun names the first task to end badly (either node's torchrun,
    # whichever saw it first) and fail-fast ends the other
    assert re.search(r"n[12] task [01] failed: exit status 1", done.stderr), done.stderr
    job_id = re.search(r"job (\S+) submitted", done.stderr)
    assert job_id
    job = slurm.job(job_id.group(1))
    assert job["state"] == "failed"
    assert "FAILED" in job["slurm"] and re.search(r"task [01]", job["failure"] or ""), job


def test_pending_reason_follow_and_stop(slurm: Env) -> None:
    long = ("example:ddp", "--steps", "100000", "--sleep", "0.2")
    first = slurm.launch("--nodes", "2", "--detach", program=long)
    assert first.returncode == 0, first.stderr
    running_id = first.stdout.strip()
    running = slurm.wait_for(running_id, r"RUNNING")
    # Every node's one GPU is taken: the second job waits, and says why.
    second = slurm.launch("--nodes", "2", "--detach", program=long)
    assert second.returncode == 0, second.stderr
    waiting_id = second.stdout.strip()
    waiting = slurm.wait_for(waiting_id, r"PENDING \((Resources|Priority)\)")
    listing = slurm.run("jobs", str(slurm.inventory))
    assert f"{waiting_id}: slurm {slurm_id(waiting)} PENDING (" in listing.stdout

    follower = subprocess.Popen(
        [*CLI, "logs", str(slurm.inventory), running_id, "--follow"],
        env=slurm.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert follower.stdout is not None
        seen = [follower.stdout.readline() for _ in range(3)]
        assert any("step" in line for line in seen), seen
        stopped = slurm.run("stop", str(slurm.inventory), running_id)
        assert stopped.returncode == 0, stopped.stderr
        assert "CANCELLED" in stopped.stdout
        # logs --follow ends by itself once the job has ended
        follower.wait(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert slurm.job(running_id)["state"] == "stopped"
    assert slurm.slurm.job_processes(slurm_id(running)) == []
    stopped = slurm.run("stop", str(slurm.inventory), waiting_id)
    assert stopped.returncode == 0, stopped.stderr
    assert slurm.job(waiting_id)["state"] == "stopped"
    assert slurm.slurm.job_processes(slurm_id(waiting)) == []


async def test_console_submits_a_slurm_job(slurm: Env, tmp_path: Path) -> None:
    """The launch form's path (Scheduler: slurm): the jobs service submits on the login
    host and follows Slurm's state into the history until the job ends; the jobs
    screen's report (r) of it holds Slurm's record."""
    inventory = load_inventory(slurm.inventory)
    history = JobHistory(slurm.data / "console.sqlite")
    spec = make_spec(
        kind="ps", hosts=("node0",), program="example:ps", args=("--steps", "3"),
        gpus_per_host=1, ps=1, workers=2,
    )  # fmt: skip
    async with ClusterConnections(inventory) as pool:
        await pool.wait_settled()
        jobs = JobsService(pool, inventory, history=history)
        try:
            job_id = await jobs.submit_slurm(spec, nodes=2)
            deadline = time.monotonic() + TIMEOUT_S
            while not (record := await asyncio.to_thread(history.get, job_id)).state.finished:
                assert time.monotonic() < deadline, record
                await asyncio.sleep(0.5)
            summary = await jobs.report(job_id, tmp_path / "report")
        finally:
            await jobs.close()
    assert record.state.value == "succeeded", record.failure
    assert SlurmStore(history.path).find(job_id) is not None
    # the plan now names the node of each task's file
    nodes = {log.node for la in record.plan.launches for log in la.log_paths if la.role != "batch"}
    assert nodes == {"n1", "n2"}
    assert "scheduler: slurm job " in summary.read_text()
    assert "JobState=COMPLETED" in (tmp_path / "report" / "slurm.txt").read_text()
