"""A slow parameter-server worker named from its step rate (issue 32, PS/async kinds), on
real sshd hosts.

A ps job (``tests/data/pace/ps_bursts.py``, TF_CONFIG, knows nothing of distconsole) on
3 hosts: ps 0 and worker 2 on node0, worker 0 on node1, worker 1 on node2. Its workers
never wait for each other, so busy time says nothing; each worker's step rate, read by
its host's supervisor from its own log, does. node2 is put under a 5 % CPU quota (a
real cgroup v1 ``cpu`` group, ``test_slow_ranks.CpuGroup``); ``jobs --json`` must name
worker 1 on node2 with a cause naming the CPU, and no other worker. 5 %, not the DDP
test's 25 %: a worker waits for nobody, so on a loaded 2-core machine the others slow
down too (sleeps that wake late, a busy ps): 25 % of a CPU left the quota'd worker only
1.0-1.6x the median's step time here, 10 % 1.7-4.1x (1.7 at load 15); at 5 % its burst
alone takes ~2 s against the others' ~0.4-1 s a step.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sshd_cluster import SshdCluster, unavailable_reason

from tests.integration.test_slow_ranks import (
    CPU_CGROUP,
    CpuGroup,
    dc,
    leader_record,
    listed,
)

pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.timeout(300)]

SCRIPT = Path(__file__).resolve().parents[1] / "data" / "pace" / "ps_bursts.py"
DETECT_S = 120.0  # the done-when's 2 minutes (two 15 s windows and the sweeps: ~45 s)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not (CPU_CGROUP / "cgroup.procs").exists() or os.geteuid() != 0:
        pytest.skip("needs root and the cgroup v1 cpu controller at /sys/fs/cgroup/cpu")
    made = SshdCluster(tmp_path_factory.mktemp("slow-ps"), 3)
    try:
        made.write_inventory(connect_timeout=20)
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module")
def job(cluster: SshdCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The ps job launched and node2 under the quota from ``quota_at``."""
    home = tmp_path_factory.mktemp("slow-ps-console")
    folder = Path(tempfile.mkdtemp(prefix="dc-pace-ps-", dir="/tmp"))
    folder.chmod(0o755)
    script = folder / SCRIPT.name
    shutil.copy(SCRIPT, script)
    script.chmod(0o644)
    inventory = str(cluster.inventory_path)
    groups: list[CpuGroup] = []
    job_id = ""
    try:
        groups.append(CpuGroup(cluster, ["node0", "node1"], "ps-fair"))
        groups.append(CpuGroup(cluster, ["node2"], "ps-limited"))
        launched = dc(
            home, "launch", inventory, "--kind", "ps", "--ps", "1", "--workers", "3",
            "--hosts", "node0,node1,node2", "--name", "pace-ps", "--skip-preflight",
            "--detach", "--", str(script), timeout=240,
        )  # fmt: skip
        assert launched.returncode == 0, launched.stderr
        job_id = launched.stdout.strip()
        # From the start: a worker is scored from its first step line on.
        groups[1].quota(0.05)
        yield {"id": job_id, "home": home, "quota_at": time.time()}
    finally:
        if job_id:
            dc(home, "stop", inventory, job_id, "--grace", "3")
        for group in groups:
            group.remove()
        shutil.rmtree(folder, ignore_errors=True)


def test_the_worker_under_a_cpu_quota_is_named_from_its_step_rate(cluster, job) -> None:  # type: ignore[no-untyped-def]
    named: list[dict[str, Any]] = []
    seen: dict[str, Any] = {}
    while time.time() - job["quota_at"] < DETECT_S:
        seen = listed(job["home"], cluster.inventory_path)[job["id"]]
        assert seen["state"] == "running", seen
        named = seen["slow_ranks"]
        if named:
            break
        time.sleep(3)
    detected_s = time.time() - job["quota_at"]
    pace: Any = None
    with contextlib.suppress(KeyError):
        pace = leader_record(cluster, "node0", job["id"]).get("rank_pace")
    assert named, f"nobody named {detected_s:.0f} s after the quota; pace: {pace}"
    print(f"\nslow worker named {detected_s:.1f} s after the quota: {named}; pace: {pace}")
    (slow,) = named
    assert (slow["rank"], slow["host"], slow["task"]) == (1, "node2", "worker 1"), named
    assert slow["basis"] == "steps" and slow["relative"] >= 1.3, slow
    assert "cpu" in slow["cause"].lower(), slow
    # Every worker was scored on its step rate; the ps task is not a worker.
    assert {p["task"] for p in pace} == {"worker 0", "worker 1", "worker 2"}, pace
    periods = leader_record(cluster, "node0", job["id"])["slow_periods"]
    assert {(p["rank"], p["host"]) for p in periods} == {(1, "node2")}, periods
    assert all(p["steps_per_s"] > 0 for p in pace), pace
