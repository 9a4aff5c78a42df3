"""--min-hosts on real sshd hosts: a host lost without its sockets closing (every process
of its user stopped with SIGSTOP: a crash, a power cut or a cut network look the same
to its peers: nothing answers, nothing closes). The survivors' workers would wait in
gloo's all-reduce for its rank until gloo's timeout (30 min); the supervisors see its
heartbeats stop, scale the job down and stop the survivors' workers of the old round
(supervisor/rounds.py), so torchrun meets again without it and the job succeeds."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import psutil
import pytest
from sshd_cluster import SshdCluster

from tests.integration.test_jobs_cli import dc
from tests.integration.test_supervisor import events, job_dir, wait_for

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

JOB_TIMEOUT_S = 180


def freeze(cluster: SshdCluster, name: str) -> int:
    """SIGSTOP to every process of the host's user (its sshd, root's, answers on)."""
    uid = cluster.host(name).uid
    frozen = 0
    for proc in psutil.process_iter(["uids"]):
        if proc.info["uids"] is not None and proc.info["uids"].real == uid:
            try:
                proc.suspend()
                frozen += 1
            except psutil.NoSuchProcess:
                continue
    return frozen


def state(cluster: SshdCluster, job_id: str) -> dict:
    try:
        record: dict = json.loads(
            (job_dir(cluster, "node0", job_id) / "supervisor.json").read_text()
        )
    except (OSError, ValueError):
        return {}
    return record


def follower_events(cluster: SshdCluster, host: str, job_id: str) -> list[dict]:
    path = job_dir(cluster, host, job_id) / f"events.{host}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_frozen_host_is_left_behind_and_the_survivors_go_on_at_once(
    sshd_cluster, tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=3)
    launched = dc(
        tmp_path, "launch", str(cluster.inventory_path), "--detach", "--skip-preflight",
        "--kind", "ddp", "--gpus-per-host", "1", "--min-hosts", "2", "--max-restarts", "3",
        "--", "example:ddp", "--steps", "40", "--sleep", "0.1",
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    job_id = launched.stdout.strip()
    out2 = job_dir(cluster, "node2", job_id) / "torchrun-2.out"
    at_12 = re.compile(r"rank \d step 12/")
    wait_for(lambda: out2.exists() and bool(at_12.search(out2.read_text())), timeout=120)
    assert freeze(cluster, "node2") > 0
    frozen_at = time.time()
    try:
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while state(cluster, job_id).get("state") in (None, "running", "hung"):
            assert time.monotonic() < deadline, state(cluster, job_id)
            time.sleep(0.5)
    finally:
        cluster.stop("node2")  # SIGKILL ends stopped processes too
    record = state(cluster, job_id)
    errors = [
        (job_dir(cluster, f"node{i}", job_id) / f"torchrun-{i}.err").read_text()[-3000:]
        for i in (0, 1)
    ]
    assert record["state"] == "succeeded", (record, errors)
    [down] = record["scale_downs"]
    assert down["host"] == "node2" and "silent" in down["cause"], down
    # Each survivor's supervisor stopped its worker of the 3-host round.
    for host, found in (
        ("node0", events(cluster, "node0", job_id)),
        ("node1", follower_events(cluster, "node1", job_id)),
    ):
        stopped = [e for e in found if e["event"] == "workers-stopped"]
        assert [(e["peer"], len(e["pids"])) for e in stopped] == [("node2", 1)], (host, found)
        assert stopped[0]["t"] >= frozen_at
    text = "\n".join(
        (job_dir(cluster, f"node{i}", job_id) / f"torchrun-{i}.out").read_text() for i in (0, 1)
    )
    assert text.count("world_size 2 ") == 2, text[-3000:]
    resumed = [int(s) for s in re.findall(r"rank \d resumed from step (\d+)", text)]
    assert len(resumed) == 2 and all(5 <= step <= 15 for step in resumed), text[-3000:]
    print("scaled down", round(down["at"] - frozen_at, 1), "s after the freeze")
