"""A job's state is the truth (issue 29, item 2) on real sshd hosts, no console open
after ``launch --detach``: the leader's host (node0, the rendezvous) crashes mid-job (its
sshd, sessions and every process of its user killed). ``jobs --json`` reads a final state
naming node0 within a minute, not the followers' RendezvousConnectionError (their own
records name node0's loss as the cause too, their error as what followed); node0 comes
back with its supervisor.json still saying running: the job stays final, for this
console's history and for a fresh console that only has the hosts' files, and ``stop``
leaves it as it is. And a job whose every supervisor died reads ``stopped`` after ``stop``
found nothing left, for good (it read ``running`` for ever: the leader's stale record)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_jobs_cli import assert_nothing_left, dc
from tests.integration.test_supervisor import (
    job_dir,
    launch_loops,
    read_json,
    supervisor_pid,
    wait_for,
)

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

FINAL = ("succeeded", "failed", "stopped")
# A worker of no collective (torchrun --no-python): the rendezvous on node0 is torchrun's
# agents' own, and the workers start without importing torch.
TRAIN = (
    "import os, time\n"
    "for step in range(1, 3000):\n"
    "    print('rank', os.environ['RANK'], f'step {step}/3000', flush=True)\n"
    "    time.sleep(0.1)\n"
)
SETTLE_S = 60  # the bar: a final state within a minute of the crash


def jobs_now(tmp_path: Path, inventory: Path) -> dict[str, Any]:
    """The one job ``jobs --json`` lists (exit 1 while a host does not answer)."""
    result = dc(tmp_path, "jobs", str(inventory), "--json")
    assert result.returncode in (0, 1) and result.stdout.strip(), result.stderr
    [job] = json.loads(result.stdout)
    assert isinstance(job, dict)
    return job


def followers(cluster: Any, job_id: str) -> dict[str, Any]:
    """The followers' own records (what they judged alone), for a failure's message."""
    return {
        h: read_json(job_dir(cluster, h, job_id) / f"supervisor.{h}.json")
        for h in ("node1", "node2")
    }


def test_the_leader_host_crashing_reads_final_naming_it_and_stays_final(
    sshd_cluster, tmp_path
) -> None:
    begun = time.monotonic()
    cluster = sshd_cluster(n=3)
    inventory = cluster.inventory_path
    launched = dc(
        tmp_path, "launch", str(inventory), "--detach", "--skip-preflight",
        "--kind", "ddp", "--gpus-per-host", "1", "--min-hosts", "2", "--max-restarts", "3",
        "--", "python3", "-c", TRAIN,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    job_id = launched.stdout.strip()
    leader_file = job_dir(cluster, "node0", job_id) / "supervisor.json"
    out = job_dir(cluster, "node0", job_id) / "torchrun-0.out"
    # Training runs on every host (the rendezvous on node0 formed).
    step = re.compile(r"rank \d step 2/")
    wait_for(lambda: out.exists() and bool(step.search(out.read_text(errors="replace"))), 150)
    assert read_json(leader_file).get("state") == "running"

    print(f"training after {time.monotonic() - begun:.0f} s")
    cluster.stop("node0")
    crashed = time.monotonic()
    job = jobs_now(tmp_path, inventory)
    while job["state"] not in FINAL:
        assert time.monotonic() - crashed < SETTLE_S, job
        time.sleep(1)
        job = jobs_now(tmp_path, inventory)
    print(f"final {time.monotonic() - crashed:.0f} s after the crash: {job['failure']!r}")
    assert job["state"] == "failed", (job, followers(cluster, job_id))
    failure = job["failure"] or ""
    assert failure.startswith("node0: host lost"), (job, followers(cluster, job_id))
    assert "RendezvousConnectionError" not in failure.splitlines()[0], failure
    # Each follower's own record names the leader's loss as the cause too, its own
    # torchrun's failure (the store gone with node0) kept as what followed.
    for host, record in followers(cluster, job_id).items():
        first = record.get("first_failure") or {}
        assert first.get("host") == "node0" and not first.get("process"), (host, record)
        assert first["reason"].startswith("the leader node0 lost ("), first
        assert first["then"]["host"] == host and first["then"]["process"], first
    assert "then, with the rendezvous on node0 gone: " in failure, failure
    # node0's record, left behind as it was: running.
    assert read_json(leader_file).get("state") in ("running", "hung")

    cluster.start("node0")
    again = jobs_now(tmp_path, inventory)
    assert again["state"] == "failed" and again["failure"] == job["failure"], again
    # A console that never saw the job: the hosts' files alone, node0's stale record too.
    fresh = jobs_now(tmp_path / "fresh", inventory)
    assert fresh["state"] == "failed", fresh
    assert fresh["failure"].startswith("node0: supervision lost on node0 at "), fresh
    stopped = dc(tmp_path, "stop", str(inventory), job_id, "--grace", "2")
    assert stopped.returncode == 0 and "nothing of the job remains" in stopped.stdout, stopped
    for console in (tmp_path, tmp_path / "fresh", tmp_path / "fresh-2"):
        assert jobs_now(console, inventory)["state"] == "failed", console
    assert_nothing_left(cluster)
    print(f"over after {time.monotonic() - begun:.0f} s")


def test_a_job_whose_supervisors_died_reads_stopped_after_stop_for_good(
    sshd_cluster, tmp_path
) -> None:
    cluster = sshd_cluster(n=2)
    job_id = launch_loops(tmp_path, cluster)
    follower_file = job_dir(cluster, "node1", job_id) / "supervisor.node1.json"
    wait_for(lambda: read_json(follower_file).get("state") == "running")
    for host in ("node0", "node1"):
        os.kill(supervisor_pid(cluster, host, job_id), signal.SIGKILL)
    assert jobs_now(tmp_path, cluster.inventory_path)["state"] == "unsupervised"
    stopped = dc(tmp_path, "stop", str(cluster.inventory_path), job_id, "--grace", "2")
    assert stopped.returncode == 0 and "nothing of the job remains" in stopped.stdout, stopped
    assert_nothing_left(cluster)
    # node0's supervisor.json still says running; nothing of the job is alive anywhere.
    assert read_json(job_dir(cluster, "node0", job_id) / "supervisor.json")["state"] == "running"
    for console in (tmp_path, tmp_path, tmp_path / "fresh"):
        job = jobs_now(console, cluster.inventory_path)
        assert job["state"] == "stopped", (console, job)
