"""`distconsole validate` on real OpenSSH sshd hosts (issue 33's done-when).

One cluster of 4 hosts for the module (each host its own Unix user). The slow host is a
real one: node2's sshd and its user's processes are put in a cgroup v1 ``cpu`` group with
a 25 % quota (``cpu.cfs_quota_us`` 25000 per 100000 us period); every session sshd forks
then inherits it. The quota is removed at teardown.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from sshd_cluster import SshdCluster, unavailable_reason

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

CPU_CGROUP = Path("/sys/fs/cgroup/cpu")
VALIDATE = (sys.executable, "-m", "console", "validate")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    made = SshdCluster(tmp_path_factory.mktemp("validate"), 4)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def validate(
    inventory: Path, data_dir: Path, *extra: str, timeout: float = 400
) -> tuple[int, dict[str, Any], str]:
    env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(data_dir))
    done = subprocess.run(
        # Not --quick: 5 windows of 0.5 s, a steadier median on a loaded machine.
        [*VALIDATE, str(inventory), "--json", "--parallel", "4", *extra],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env,
    )
    try:
        return done.returncode, json.loads(done.stdout), done.stderr
    except json.JSONDecodeError as exc:
        raise AssertionError(f"not JSON: {done.stdout!r} {done.stderr!r}") from exc


@contextlib.contextmanager
def cpu_quota(cluster: SshdCluster, name: str, share: float) -> Iterator[None]:
    """``name``'s sshd and its user's processes limited to ``share`` of one CPU."""
    if not (CPU_CGROUP / "tasks").exists() or os.geteuid() != 0:
        pytest.skip("needs root and the cgroup v1 cpu controller at /sys/fs/cgroup/cpu")
    host = cluster.host(name)
    group = CPU_CGROUP / f"distconsole-validate-{os.getpid()}"
    group.mkdir()
    try:
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text(str(int(100000 * share)))
        assert host.process is not None
        pids = [host.process.pid]
        pids += [p.pid for p in psutil.process_iter(["uids"]) if p.info["uids"].real == host.uid]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, OSError):
                (group / "tasks").write_text(str(pid))
        yield
    finally:
        for _attempt in range(50):
            left = (group / "tasks").read_text().split()
            for pid in left:
                with contextlib.suppress(ProcessLookupError, OSError):
                    (CPU_CGROUP / "tasks").write_text(pid)
            with contextlib.suppress(OSError):
                group.rmdir()
                break
            time.sleep(0.1)


def host_rows(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["host"]: r for r in document["rows"] if r["gpu"] is None}


def test_a_fleet_with_no_host_limited_is_all_ok_links_included(
    cluster: SshdCluster, data_dir: Path
) -> None:
    status, document, stderr = validate(cluster.inventory_path, data_dir)
    rows = host_rows(document)
    assert set(rows) == {"node0", "node1", "node2", "node3"}, document
    said = {h: (r["state"], r["reasons"], r["figures"]) for h, r in rows.items()}
    assert all(r["state"] == "ok" for r in rows.values()), said
    assert all(r["figures"]["cpu_gflops"] > 0 for r in rows.values())
    assert all(r["figures"]["cpu_threads"] == 1 for r in rows.values())
    # The ring over all 4 hosts, then the 4 ring-neighbour pairs in two rounds (and, if
    # the load here made one look slow, its follow-ups), every link ok in the end.
    assert document["ring"]["hosts"] == ["node0", "node1", "node2", "node3"], document
    assert document["ring"]["busbw_gbps"] > 0
    pairs = {tuple(sorted(link["hosts"])) for link in document["links"]}
    assert pairs >= {
        ("node0", "node1"),
        ("node1", "node2"),
        ("node2", "node3"),
        ("node0", "node3"),
    }, document
    assert [x for x in document["links"] if x["state"] != "ok"] == [], document
    assert document["errors"] == [] and status in (0, 1)
    # Progress went to stderr, one line per phase and host.
    assert "validate: node0: compute" in stderr and "validate: all-reduce over 4 hosts" in stderr
    # Kept for `health`.
    stored = json.loads((data_dir / "validations.json").read_text())
    (per_host,) = stored.values()
    assert {h: v["state"] for h, v in per_host.items()} == dict.fromkeys(rows, "ok")
    health = subprocess.run(
        [sys.executable, "-m", "console", "health", str(cluster.inventory_path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=dict(os.environ, DISTCONSOLE_DATA_DIR=str(data_dir)),
    )
    shown = {r["host"]: r.get("validated") for r in json.loads(health.stdout)}
    assert set(shown) == set(rows), health.stdout
    assert all(v["state"] == "ok" and v["text"].endswith(" ago: ok") for v in shown.values())


def test_the_host_under_a_25_percent_cpu_quota_is_flagged_the_others_pass(
    cluster: SshdCluster, data_dir: Path
) -> None:
    with cpu_quota(cluster, "node2", 0.25):
        status, document, stderr = validate(cluster.inventory_path, data_dir, "--no-links")
    rows = host_rows(document)
    slow = rows["node2"]
    assert slow["state"] in ("warn", "fail"), (document, stderr)
    assert any("CPU" in reason for reason in slow["reasons"]), slow
    assert slow["figures"]["cpu_quota_cpus"] == 0.25, slow
    others = {h: r["state"] for h, r in rows.items() if h != "node2"}
    assert others == {"node0": "ok", "node1": "ok", "node3": "ok"}, document
    assert status == (1 if slow["state"] == "fail" else 0)
    assert document["links"] == [] and document["ring"] is None


def test_ctrl_c_ends_every_process_it_started_on_the_hosts(
    cluster: SshdCluster, data_dir: Path
) -> None:
    env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(data_dir))
    # 60 s windows: the programs would run for minutes; they end only if killed.
    process = subprocess.Popen(
        [*VALIDATE, str(cluster.inventory_path), "--parallel", "4", "--json", "--window", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )
    assert process.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        seen.append(line)
        if line.startswith("validate: node") and line.rstrip().endswith(": cpu"):
            break  # a program on a host is measuring: its process group is known
        assert line, seen
    else:
        pytest.fail(f"no host started measuring: {seen}")
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 130, seen
    uids = {h.uid for h in cluster.hosts}

    def programs_left() -> list[str]:
        found = []
        for proc in psutil.process_iter(["uids", "cmdline"]):
            with contextlib.suppress(psutil.Error, TypeError):
                words = " ".join(proc.info["cmdline"] or ())
                if proc.info["uids"].real in uids and '"mode"' in words:
                    found.append(f"{proc.pid} {words[:80]}")
        return found

    deadline = time.monotonic() + 30
    while programs_left() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert programs_left() == []
