"""Slow ranks named from outside the job (issue 32's done-when), on real sshd hosts.

One cluster of 6 hosts for the module, two 3-host gloo DDP jobs started together from
``tests/data/pace/ddp_bursts.py`` (a script that knows nothing of distconsole): a clean
one on node0-2 and one on node3-5 whose node5 is then put under a 25 % CPU quota (a real
cgroup v1 ``cpu`` group; every process of node5's user and its sshd moved into it; the
other hosts' in a group of the same weight, without a quota: see :class:`CpuGroup`). The
limited job's rank 2 must be named by ``jobs --json`` within 2 minutes with a cause
naming the CPU, and nobody else; the clean job must run 5 minutes with no rank named.
The two run at the same time so the module costs ~6 minutes of wall, not 7+.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from sshd_cluster import SshdCluster, unavailable_reason

from tests.integration.test_jobs_cli import CLI, cli_env
from tests.integration.test_supervisor import job_dir

# The clean job is watched 5 minutes from the quota, and the module's setup (6 hosts, two
# launches) and teardown (two stops) fall to the first and last test: above the
# suite's 300 s per test.
pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.timeout(720)]

CPU_CGROUP = Path("/sys/fs/cgroup/cpu")
SCRIPT = Path(__file__).resolve().parents[1] / "data" / "pace" / "ddp_bursts.py"
DETECT_S = 120.0  # the done-when: named within 2 minutes of the quota
CLEAN_S = 300.0  # the done-when: 5 minutes with nobody named
CLEAN_HOSTS = "node0,node1,node2"
LIMITED_HOSTS = "node3,node4,node5"
# The most v1 allows (256 nice-0 tasks' weight): this machine's other load must not
# starve the ranks (the jobs ask ~0.5 CPU in all).
SHARES = 262144


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not (CPU_CGROUP / "cgroup.procs").exists() or os.geteuid() != 0:
        pytest.skip("needs root and the cgroup v1 cpu controller at /sys/fs/cgroup/cpu")
    made = SshdCluster(tmp_path_factory.mktemp("slow-ranks"), 6)
    try:
        # Six sshd hosts answering two launches at once on a loaded 2-core machine.
        made.write_inventory(connect_timeout=20)
        yield made
    finally:
        made.close()


def dc(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], env=cli_env(home), capture_output=True, text=True, timeout=timeout
    )


def launch(home: Path, inventory: Path, hosts: str, name: str, script: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            *CLI, "launch", str(inventory), "--kind", "ddp", "--gpus-per-host", "1",
            "--hosts", hosts, "--name", name, "--skip-preflight", "--detach", "--",
            str(script),
        ],
        env=cli_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def steps_seen(cluster: SshdCluster, host: str, job_id: str) -> bool:
    folder = job_dir(cluster, host, job_id)
    for log in folder.glob("*.out") if folder.exists() else ():
        with contextlib.suppress(OSError):
            if " step 10 " in log.read_text(errors="replace"):
                return True
    return False


class CpuGroup:
    """A cgroup v1 ``cpu`` group holding hosts' sshd and every process of their users,
    threads and all (``cgroup.procs``); what they fork from now on inherits it. Its
    weight (``cpu.shares``) keeps the jobs' ranks ahead of whatever else loads this
    machine, so that the quota, not the machine, is what makes a rank slow."""

    def __init__(self, cluster: SshdCluster, names: list[str], label: str) -> None:
        self.path = CPU_CGROUP / f"distconsole-slow-ranks-{label}-{os.getpid()}"
        self.path.mkdir()
        (self.path / "cpu.shares").write_text(str(SHARES))
        (self.path / "cpu.cfs_period_us").write_text("100000")
        uids = {cluster.host(n).uid for n in names}
        pids = [p.pid for n in names if (p := cluster.host(n).process) is not None]
        pids += [p.pid for p in psutil.process_iter(["uids"]) if p.info["uids"].real in uids]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, OSError):
                (self.path / "cgroup.procs").write_text(str(pid))

    def quota(self, share: float) -> None:
        (self.path / "cpu.cfs_quota_us").write_text(str(int(100000 * share)))

    def remove(self) -> None:
        for _attempt in range(50):
            for pid in (self.path / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError, OSError):
                    (CPU_CGROUP / "cgroup.procs").write_text(pid)
            with contextlib.suppress(OSError):
                self.path.rmdir()
                return
            time.sleep(0.1)


@pytest.fixture(scope="module")
def jobs(cluster: SshdCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Both jobs launched together and training; node5 under the quota from ``quota_at``."""
    home = tmp_path_factory.mktemp("slow-ranks-console")
    folder = Path(tempfile.mkdtemp(prefix="dc-pace-", dir="/tmp"))
    folder.chmod(0o755)
    script = folder / SCRIPT.name
    shutil.copy(SCRIPT, script)
    script.chmod(0o644)
    inventory = cluster.inventory_path
    groups: list[CpuGroup] = []
    ids: dict[str, str] = {}
    try:
        groups.append(CpuGroup(cluster, ["node0", "node1", "node2", "node3", "node4"], "fair"))
        groups.append(CpuGroup(cluster, ["node5"], "limited"))
        started = {
            "clean": launch(home, inventory, CLEAN_HOSTS, "pace-clean", script),
            "limited": launch(home, inventory, LIMITED_HOSTS, "pace-limited", script),
        }
        for name, proc in started.items():
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
            ids[name] = out.strip()
        deadline = time.monotonic() + 240
        while not all(
            steps_seen(cluster, h, ids[n]) for h, n in (("node0", "clean"), ("node3", "limited"))
        ):
            assert time.monotonic() < deadline, "the jobs did not train"
            time.sleep(1)
        groups[1].quota(0.25)
        yield {**ids, "home": home, "quota_at": time.time(), "training_at": time.time()}
    finally:
        for job_id in ids.values():
            dc(home, "stop", str(inventory), job_id, "--grace", "3")
        for group in groups:
            group.remove()
        shutil.rmtree(folder, ignore_errors=True)


def listed(home: Path, inventory: Path) -> dict[str, dict[str, Any]]:
    done = dc(home, "jobs", str(inventory), "--json")
    assert done.returncode == 0, done.stderr
    return {job["id"]: job for job in json.loads(done.stdout)}


def leader_record(cluster: SshdCluster, host: str, job_id: str) -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError):
        record = json.loads((job_dir(cluster, host, job_id) / "supervisor.json").read_text())
        if isinstance(record, dict):
            return record
    return {}


def test_the_rank_under_a_cpu_quota_is_named_within_two_minutes(cluster, jobs) -> None:  # type: ignore[no-untyped-def]
    named: list[dict[str, Any]] = []
    while time.time() - jobs["quota_at"] < DETECT_S:
        job = listed(jobs["home"], cluster.inventory_path)[jobs["limited"]]
        assert job["state"] == "running", job
        named = job["slow_ranks"]
        if named:
            break
        time.sleep(3)
    detected_s = time.time() - jobs["quota_at"]
    pace = leader_record(cluster, "node3", jobs["limited"]).get("rank_pace")
    assert named, f"nobody named {detected_s:.0f} s after the quota; pace: {pace}"
    print(f"\nslow rank named {detected_s:.1f} s after the quota (jobs --json); pace: {pace}")
    (slow,) = named
    assert (slow["rank"], slow["host"]) == (2, "node5"), named
    assert slow["relative"] >= 1.3 and "cpu" in slow["cause"].lower(), slow
    assert slow["since"] >= jobs["training_at"] - 60


def test_the_job_with_no_host_limited_names_nobody_for_five_minutes(cluster, jobs) -> None:  # type: ignore[no-untyped-def]
    inventory = cluster.inventory_path
    while True:
        job = listed(jobs["home"], inventory)[jobs["clean"]]
        assert job["state"] == "running", job
        assert job["slow_ranks"] == [], job["slow_ranks"]
        if time.time() - jobs["training_at"] >= CLEAN_S:
            break
        time.sleep(15)
    record = leader_record(cluster, "node0", jobs["clean"])
    # The ranks were measured and scored all along: the silence is a verdict.
    assert {p["rank"] for p in record["rank_pace"]} == {0, 1, 2}, record.get("rank_pace")
    assert record["slow_periods"] == [], record["slow_periods"]
