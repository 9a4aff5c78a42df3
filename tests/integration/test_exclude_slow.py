"""``--exclude-slow`` end to end (issue 32, item 4) on real sshd hosts: an elastic gloo DDP
job (``tests/data/pace/ddp_bursts.py``, knows nothing of distconsole) on 3 hosts with
``--min-hosts 2``; node2 under a 25 % CPU quota (a real cgroup v1 group,
``test_slow_ranks.CpuGroup``). Its rank is scored slow, and after ``--exclude-slow``'s
0.1 minutes the leader tells node2's supervisor to leave: it drains itself, the job
scales down to node0 and node1 and trains on (a new round's steps on node0)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sshd_cluster import SshdCluster, unavailable_reason

from tests.integration.test_slow_ranks import CPU_CGROUP, CpuGroup, dc
from tests.integration.test_supervisor import events, job_dir

pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.timeout(360)]

SCRIPT = Path(__file__).resolve().parents[1] / "data" / "pace" / "ddp_bursts.py"
DRAIN_S = 180.0  # two 15 s windows, 6 s slow, the drain and the new round


def record(cluster: SshdCluster, job_id: str) -> dict[str, Any]:
    try:
        found: dict[str, Any] = json.loads(
            (job_dir(cluster, "node0", job_id) / "supervisor.json").read_text()
        )
    except (OSError, ValueError):
        return {}
    return found


def step_lines(cluster: SshdCluster, job_id: str) -> int:
    path = job_dir(cluster, "node0", job_id) / "torchrun-0.out"
    text = path.read_text(errors="replace") if path.exists() else ""
    return text.count(" step 10 ")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not (CPU_CGROUP / "cgroup.procs").exists() or os.geteuid() != 0:
        pytest.skip("needs root and the cgroup v1 cpu controller at /sys/fs/cgroup/cpu")
    made = SshdCluster(tmp_path_factory.mktemp("exclude-slow"), 3)
    try:
        made.write_inventory(connect_timeout=20)
        yield made
    finally:
        made.close()


def test_a_follower_slow_long_enough_is_drained_and_the_job_trains_on(
    cluster: SshdCluster, tmp_path: Path
) -> None:
    folder = Path(tempfile.mkdtemp(prefix="dc-exclude-slow-", dir="/tmp"))
    folder.chmod(0o755)
    script = folder / SCRIPT.name
    shutil.copy(SCRIPT, script)
    script.chmod(0o644)
    inventory = str(cluster.inventory_path)
    groups: list[CpuGroup] = []
    job_id = ""
    try:
        groups.append(CpuGroup(cluster, ["node0", "node1"], "excl-fair"))
        groups.append(CpuGroup(cluster, ["node2"], "excl-limited"))
        launched = dc(
            tmp_path, "launch", inventory, "--kind", "ddp", "--gpus-per-host", "1",
            "--min-hosts", "2", "--max-restarts", "2", "--exclude-slow", "0.1",
            "--name", "excl", "--skip-preflight", "--detach", "--", str(script), timeout=240,
        )  # fmt: skip
        assert launched.returncode == 0, launched.stderr
        job_id = launched.stdout.strip()
        groups[1].quota(0.25)
        quota_at = time.time()
        deadline = time.monotonic() + DRAIN_S
        while not record(cluster, job_id).get("scale_downs"):
            said = [(e["event"], e.get("peer")) for e in events(cluster, "node0", job_id)]
            assert time.monotonic() < deadline, (record(cluster, job_id), said)
            time.sleep(1)
        scaled_s = time.time() - quota_at
        seen = record(cluster, job_id)
        (down,) = seen["scale_downs"]
        assert down["host"] == "node2", down
        excluded = [e for e in events(cluster, "node0", job_id) if e["event"] == "exclude-slow"]
        assert [e["peer"] for e in excluded] == ["node2"], excluded
        # The job trains on without node2: a new round reaches its step 10 on node0.
        before = step_lines(cluster, job_id)
        deadline = time.monotonic() + 120
        while step_lines(cluster, job_id) <= before:
            now = record(cluster, job_id)
            assert now.get("state") == "running", now
            assert time.monotonic() < deadline, now
            time.sleep(1)
        now = record(cluster, job_id)
        assert now["hosts_now"] == ["node0", "node1"], now
        print(f"\nnode2 drained {scaled_s:.1f} s after the quota: {excluded[0]['why']}")
    finally:
        if job_id:
            dc(tmp_path, "stop", inventory, job_id, "--grace", "3")
        for group in groups:
            group.remove()
        shutil.rmtree(folder, ignore_errors=True)
