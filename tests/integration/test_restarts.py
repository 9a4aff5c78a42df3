"""--max-restarts on real sshd hosts, no console open after ``launch --detach``: torchrun's
own restarts (c10d) seen by the supervisors as restarts, every rank resuming from its
checkpoint; mpirun re-run by the launcher host's supervisor; a PS worker restarted in
place by its host's supervisor. ``jobs --json`` counts the restarts; each one is an
event in the leader's ``events.jsonl`` naming its host and cause."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from sshd_cluster import SshdCluster

from tests.integration.test_jobs_cli import assert_nothing_left, dc, jobs_json
from tests.integration.test_jobs_mpi import needs_horovodrun, needs_mpirun
from tests.integration.test_supervisor import events, job_dir, wait_for

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

JOB_TIMEOUT_S = 240


def launch(tmp_path: Path, cluster: SshdCluster, *options: str) -> str:
    result = dc(tmp_path, "launch", str(cluster.inventory_path), "--detach", *options)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def wait_until_over(
    tmp_path: Path, cluster: SshdCluster, timeout: float = JOB_TIMEOUT_S, *, job_id: str = ""
) -> dict[str, Any]:
    """The job's ``jobs --json`` row once it is over. With ``job_id``, first waits for the
    leader's (node0's) supervisor to record the job's end, reading its file here: a
    ``jobs --json`` every second costs a process start and ssh logins, CPU the job's own
    ranks then wait for on a small machine."""
    deadline = time.monotonic() + timeout
    if job_id:
        record = job_dir(cluster, "node0", job_id) / "supervisor.json"
        while not ended(record) and time.monotonic() < deadline:
            time.sleep(0.1)
    while True:
        [job] = jobs_json(tmp_path, cluster.inventory_path)
        if job["state"] not in ("running", "starting") or time.monotonic() > deadline:
            return job
        time.sleep(1)


def ended(record: Path) -> bool:
    try:
        return json.loads(record.read_text()).get("ended_at") is not None
    except (OSError, ValueError, AttributeError):
        return False


def restarted(cluster: SshdCluster, job_id: str) -> list[dict[str, Any]]:
    return [e for e in events(cluster, "node0", job_id) if e["event"] == "restarted"]


@pytest.mark.parametrize("shared_home", [False, True])
def test_ddp_restarts_through_torchrun_and_resumes_from_checkpoints(
    sshd_cluster, tmp_path, shared_home: bool
) -> None:
    """2 hosts x 2 ranks, rank 1 exits 3 at step 30 (of 60) on the first attempt only. With
    ``shared_home`` both hosts have one job directory (one user): each supervisor counts
    its own torchrun's attempts."""
    cluster = sshd_cluster(n=2, shared_account=shared_home)
    job_id = launch(
        tmp_path, cluster, "--kind", "ddp", "--gpus-per-host", "2", "--max-restarts", "2",
        "--", "example:ddp", "--steps", "60", "--crash-rank", "1", "--crash-at-step", "30",
        "--crash-once",
    )  # fmt: skip
    job = wait_until_over(tmp_path, cluster, job_id=job_id)
    outputs = {
        host: (job_dir(cluster, host, job_id) / f"torchrun-{i}.out").read_text(errors="replace")
        for i, host in enumerate(("node0", "node1"))
    }
    errors = [
        (job_dir(cluster, host, job_id) / f"torchrun-{i}.err").read_text(errors="replace")[-6000:]
        for i, host in enumerate(("node0", "node1"))
    ]
    assert job["state"] == "succeeded", (job, errors)
    assert job["restarts"] == 1, job
    table = dc(tmp_path, "jobs", str(cluster.inventory_path))
    assert "succeeded · restart 1" in table.stdout, table.stdout
    text = "\n".join(outputs.values())
    resumed = {int(r): int(s) for r, s in re.findall(r"rank (\d) resumed from step (\d+)", text)}
    assert sorted(resumed) == [0, 1, 2, 3], text[-3000:]
    assert all(25 <= step <= 30 for step in resumed.values()), resumed  # saved every 5
    assert len(re.findall(r"rank \d params_checksum=", text)) == 4
    # Each rank says which restart it runs in, the same number on every rank: torchrun
    # counts per agent, and the agents whose workers did not fail count none (issue 30).
    told = sorted(re.findall(r"rank (\d) world_size \d+ host \S+ restart (\d+)", text))
    assert told == sorted((str(r), n) for r in range(4) for n in "01"), told
    # The host whose rank failed restarts (a peer whose own workers failed in the
    # collective too may report its restart of the same round). The cause is the failure
    # torchrun reports: rank 1's exit 3, or, when its neighbour on node0 failed in the
    # collective within the same poll (torchrun reports the lowest local rank that ended),
    # that one: exit 1 or gloo's abort (SIGABRT), named as a signal.
    found = restarted(cluster, job_id)
    assert found and all(e["count"] == 1 for e in found), found
    causes = [e["cause"] for e in found]
    node0 = [c for c in causes if c.get("host") == "node0"]
    assert node0 and node0[0].get("local_rank") in (0, 1), causes
    assert node0[0].get("exit_code") in (1, 3) or node0[0].get("signal") == "SIGABRT", causes
    assert all(c["host"] in ("node0", "node1") for c in causes), causes
    out = tmp_path / "report"
    made = dc(tmp_path, "report", str(cluster.inventory_path), job_id, "--out", str(out))
    assert made.returncode == 0, made.stderr
    summary = (out / "summary.txt").read_text()
    last = r"restarts: 1; the last: rank \d on node\d \((exit status [13]|SIGABRT)\)"
    assert re.search(last, summary), summary
    assert " restarted " in (out / "timeline.txt").read_text()
    assert_nothing_left(cluster)


@needs_mpirun
def test_mpirun_is_run_again_and_succeeds_on_its_second_attempt(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2, shared_account=True)
    cluster.write_inventory(interface="lo")
    # Every rank fails on the first attempt (restart 0), succeeds on the second.
    job_id = launch(
        tmp_path, cluster, "--kind", "mpi", "--gpus-per-host", "1", "--max-restarts", "1",
        "--", "/bin/sh", "-c",
        'echo "rank $OMPI_COMM_WORLD_RANK restart $DISTCONSOLE_RESTART_COUNT"; '
        'test "$DISTCONSOLE_RESTART_COUNT" = 1 || exit 3',
    )  # fmt: skip
    job = wait_until_over(tmp_path, cluster, job_id=job_id)
    assert job["state"] == "succeeded", job
    assert job["restarts"] == 1, job
    [event] = restarted(cluster, job_id)
    assert event["process"] == "launcher-0" and event["count"] == 1, event
    assert event["cause"]["host"] == "node0" and event["cause"]["exit_code"] != 0, event
    assert_nothing_left(cluster)


@needs_mpirun
def test_mpirun_failing_every_attempt_fails_after_its_restarts(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2, shared_account=True)
    cluster.write_inventory(interface="lo")
    job_id = launch(
        tmp_path, cluster, "--kind", "mpi", "--gpus-per-host", "1", "--max-restarts", "1",
        "--", "/bin/sh", "-c", "exit 3",
    )  # fmt: skip
    job = wait_until_over(tmp_path, cluster, job_id=job_id)
    assert job["state"] == "failed" and job["restarts"] == 1, job
    assert len(restarted(cluster, job_id)) == 1
    assert_nothing_left(cluster)


@needs_horovodrun
def test_horovodrun_is_run_again_and_its_ranks_resume(sshd_cluster, tmp_path) -> None:
    """Without Horovod elastic, a horovod job restarts as an MPI one: its launcher runs
    again; rank 0 saved every 5 steps, so every rank resumes from step 10."""
    cluster = sshd_cluster(n=2, shared_account=True)
    cluster.write_inventory(interface="lo")
    job_id = launch(
        tmp_path, cluster, "--kind", "horovod", "--gpus-per-host", "1", "--max-restarts", "1",
        "--", "example:horovod", "--steps", "20", "--crash-rank", "1", "--crash-at-step", "12",
        "--crash-once",
    )  # fmt: skip
    job = wait_until_over(tmp_path, cluster, job_id=job_id)
    assert job["state"] == "succeeded", job
    assert job["restarts"] == 1, job
    for rank, host in enumerate(("node0", "node1")):
        out = (job_dir(cluster, host, job_id) / f"ranks/rank.{rank}/stdout").read_text()
        # The first attempt's lines stay (appended), then the resumed run's.
        assert f"rank {rank} step 9/20" in out, out
        assert f"rank {rank} resumed from step 10" in out and f"rank {rank} step 20/20" in out
    assert_nothing_left(cluster)


def test_a_failed_ps_worker_is_restarted_in_place(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    job_id = launch(
        tmp_path, cluster, "--kind", "ps", "--ps", "1", "--workers", "2",
        "--max-restarts", "1", "--notify-command", "echo $DISTCONSOLE_TEXT >> told.txt",
        "--notify-on", "restarted", "--", "example:ps", "--steps", "30", "--sleep", "0.05",
        "--crash-rank", "1", "--crash-at-step", "10", "--crash-once",
    )  # fmt: skip
    job = wait_until_over(tmp_path, cluster, job_id=job_id)
    assert job["state"] == "succeeded", job
    assert job["restarts"] == 1, job
    [event] = restarted(cluster, job_id)
    assert event["process"] == "worker-1" and event["cause"]["exit_code"] == 3, event
    host = event["of_host"]
    out = (job_dir(cluster, host, job_id) / "worker-1.out").read_text()
    # The first attempt's lines stay (appended), then the resumed run's.
    assert "worker 1 step 9/30" in out and "worker 1 resumed from step 9 (restart 1)" in out, out
    assert "worker 1 step 30/30" in out and "worker 1 done" in out
    # --notify-on restarted: the leader's supervisor ran the command once, naming it.
    told = job_dir(cluster, "node0", job_id) / "told.txt"
    wait_for(told.exists, timeout=30)
    assert "restart 1: worker-1 exit status 3" in told.read_text(), told.read_text()
    assert_nothing_left(cluster)
