"""The backend seam over real sshd hosts: ``SshBackend`` driven only through the
``JobBackend`` protocol, and the CLI's ``launch`` and the console's ``JobsService``
going through the one ``jobs/service.py`` launch path (same pre-flight verdict, same
steps, for the same spec on the same hosts)."""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path

import pytest
from sshd_cluster import SshdCluster

from console.errors import PreflightError
from console.inventory import Inventory, load
from console.jobs.backend import BackendStatus, JobBackend, SshBackend
from console.jobs.history import JobHistory
from console.jobs.models import JobState
from console.jobs.service import JobService, LaunchEvent, Phase, make_backend
from console.jobs.spec import make_spec
from console.jobs.ssh.runner import JobRunner
from console.transport.pool import ClusterConnections
from console.ui.jobs_service import JobsService
from tests.integration.test_jobs_cli import dc, live_processes

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

JOB_TIMEOUT_S = 180


async def wait_for(path: Path, pattern: str) -> None:
    """Until ``pattern`` is in ``path`` (the job's own log file, read on this machine)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + JOB_TIMEOUT_S
    while not (path.exists() and re.search(pattern, path.read_text(errors="replace"))):
        assert loop.time() < deadline, f"{pattern!r} never appeared in {path}"
        await asyncio.sleep(0.2)


async def final(backend: JobBackend, job_id: str) -> BackendStatus:
    last = None
    async for status in backend.watch(job_id):
        last = status
    assert last is not None and last.finished
    return last


async def test_ssh_backend_through_the_protocol(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    inventory = load(cluster.inventory_path)
    history = JobHistory(tmp_path / "jobs.sqlite3")
    async with ClusterConnections(inventory) as pool:
        await pool.wait_settled()
        backend: JobBackend = make_backend("ssh", pool, inventory, history=history, grace_s=3)
        assert isinstance(backend, SshBackend) and backend.scheduler == "ssh"

        # A tiny job to its end: prepare -> preflight -> submit -> watch -> logs.
        spec = make_spec(kind="ddp", program="example:ddp", gpus_per_host=1, args=["--steps", "2"])
        prepared = await backend.prepare(spec)
        assert prepared.script is None and {ln.host for ln in prepared.plan.launches} == {
            "node0",
            "node1",
        }
        assert isinstance(await backend.preflight(prepared), tuple)
        job_id = await backend.submit(prepared)
        assert job_id == prepared.job_id
        done = await asyncio.wait_for(final(backend, job_id), JOB_TIMEOUT_S)
        assert done.state is JobState.SUCCEEDED, done.failure
        plan = await backend.logs(job_id)
        node1_out = next(
            log.path
            for launch in plan.launches
            if launch.host == "node1"
            for log in launch.log_paths
            if log.stream == "stdout" and log.role != "rank"
        )
        on_node1 = cluster.host("node1").home / node1_out.removeprefix("~/")
        assert "params_checksum=" in on_node1.read_text()

        # A long one, stopped by a second backend that knows it only from the history
        # (as `distconsole stop` in another terminal): status re-attaches, stop ends it.
        long_spec = make_spec(
            kind="ddp",
            program="example:ddp",
            gpus_per_host=1,
            args=["--steps", "100000", "--sleep", "0.05"],
        )
        long_id = await backend.submit(await backend.prepare(long_spec))
        first = await anext(aiter(backend.watch(long_id)))
        assert first.state is JobState.RUNNING
        long_plan = await backend.logs(long_id)
        node1_dir = cluster.host("node1").home / long_plan.job_dirs["node1"].removeprefix("~/")
        await wait_for(node1_dir / "torchrun-1.out", r"rank 1 step 2/")
        other = SshBackend(JobRunner(pool, inventory, history=history, grace_s=3))
        assert (await other.status(long_id)).state is JobState.RUNNING
        report = await other.stop(long_id)
        assert report.clean, report.describe()
        assert (await other.status(long_id)).state is JobState.STOPPED
        assert history.get(long_id).state is JobState.STOPPED
        await other.close()
        await backend.close()
    # The job is gone at once; the helpers the closed connections leave (jobctl watch)
    # exit on their own when they see stdin's EOF, a moment later under load.
    await nothing_left_within(cluster, 15)


async def nothing_left_within(cluster: SshdCluster, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while live_processes(cluster) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert live_processes(cluster) == {}


def fail_lines(text: str) -> set[str]:
    return set(re.findall(r"FAIL \[[^\]]+\] .*", text))


async def ui_launch(inventory: Inventory, history: JobHistory, spec_args: dict) -> tuple:
    """The launch form's path: JobsService.launch; returns (the error, the events seen)."""
    events: list[LaunchEvent] = []
    async with ClusterConnections(inventory) as pool:
        await pool.wait_settled()
        jobs = JobsService(pool, inventory, history=history)
        assert isinstance(jobs.service, JobService) and jobs.service.backend.scheduler == "ssh"
        with pytest.raises(PreflightError) as caught:
            await jobs.launch(make_spec(**spec_args), on_event=events.append)
        await jobs.close()
    return caught.value, events


async def test_cli_and_console_share_the_launch_path(sshd_cluster, tmp_path) -> None:
    # train.py only on node0 and an interface no host has: both the CLI and the console
    # refuse the same spec on the same hosts with the same findings, nothing started.
    cluster = sshd_cluster(n=2)
    node0 = cluster.host("node0")
    work = node0.home / "distconsole"
    work.mkdir(exist_ok=True)
    (work / "train.py").write_text("print('hello')\n")
    os.chown(work, node0.uid, node0.gid)
    os.chown(work / "train.py", node0.uid, node0.gid)
    inventory = load(cluster.inventory_path)
    history = JobHistory(tmp_path / "ui.sqlite3")
    spec_args = {
        "kind": "ddp",
        "program": "train.py",
        "gpus_per_host": 1,
        "interface": "nosuch0",
    }
    error, events = await ui_launch(inventory, history, spec_args)
    ui_fails = fail_lines(str(error))
    assert any("train.py not found" in line and "node1" in line for line in ui_fails), ui_fails
    assert any("nosuch0" in line for line in ui_fails), ui_fails
    phases = [e.name for e in events if isinstance(e, Phase)]
    assert phases == ["plan", "pre-flight"]  # refused before the submit step

    argv = ["launch", str(cluster.inventory_path), "--kind", "ddp", "--gpus-per-host", "1"]
    argv += ["--interface", "nosuch0", "--", "train.py"]
    cli = await asyncio.to_thread(dc, tmp_path, *argv)
    assert cli.returncode == 1, cli.stderr
    assert fail_lines(cli.stderr) == ui_fails, cli.stderr
    assert history.summaries(inventory=inventory.path) == []
    await nothing_left_within(cluster, 15)
