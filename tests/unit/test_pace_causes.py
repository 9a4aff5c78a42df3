"""The slow-rank causes (issue 32, item 3): a replayed nvidia-smi capture, cgroup
``cpu.stat`` and ``/proc/vmstat`` text, and the live reading on this machine (a real
CPU quota through cgroup v1's ``cpu`` controller; the GPU through the GPU STAND-IN,
tests/standin/nvidia-smi, which answers from a capture: this machine has no GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.hostprogs.pace import causes
from console.hostprogs.pace.cause_gpu import (
    CAUSE_QUERY_GPU,
    cause_csv_rows,
    cause_foreign_pids,
    cause_gpu_words,
    cause_pcie_words,
    cause_throttle_reasons,
)
from console.hostprogs.pace.cause_host import (
    cause_cgroup_dirs,
    cause_cpu_mounts,
    cause_load_words,
    cause_parse_keyed,
    cause_swap_words,
    cause_throttle_words,
    cause_throttled_fraction,
)

TESTS = Path(__file__).resolve().parent.parent
DATA = TESTS / "data" / "nvidia-smi"
STANDIN = TESTS / "standin"
# Derived from the real H200 capture (SOURCES.md, section 4): HW thermal slowdown set
# and the PCIe link at x4 of x16; nothing else differs.
SLOW = DATA / "csv_h200-slow_query-gpu.csv"
REAL = DATA / "csv_h200_query-gpu.csv"


def test_replayed_capture_with_thermal_slowdown_and_x4_link_gives_the_cause_in_words() -> None:
    (row,) = cause_csv_rows(SLOW.read_text(errors="replace"))
    words, told = cause_gpu_words(row)
    assert told
    assert words == ["GPU 0 clocks throttled: thermal slowdown", "GPU 0 PCIe link x4 of x16"]


def test_the_real_capture_it_came_from_shows_nothing() -> None:
    (row,) = cause_csv_rows(REAL.read_text(errors="replace"))
    assert cause_gpu_words(row) == ([], True)


def test_the_mask_alone_names_the_reasons_as_rank_cause_asks_for_it() -> None:
    (full,) = cause_csv_rows(SLOW.read_text(errors="replace"))
    asked = [f for f in CAUSE_QUERY_GPU if f in full]
    (row,) = cause_csv_rows(", ".join(full[f] for f in asked) + "\n", asked)
    assert cause_throttle_reasons(row) == ["thermal slowdown"]
    # Before R535 the mask is clocks_throttle_reasons.active (same bits).
    older = {"index": "1", "clocks_throttle_reasons.active": "0x00000000000000A4"}
    assert cause_throttle_reasons(older) == [
        "software thermal slowdown",
        "power brake",
        "power cap",
    ]
    assert cause_throttle_reasons({"index": "1", "clocks_event_reasons.active": "[N/A]"}) is None


def test_pcie_generation_counts_only_under_load_and_within_the_hosts_slot() -> None:
    base = {"pcie.link.width.current": "16", "pcie.link.width.max": "16"}
    idle = {**base, "pcie.link.gen.current": "1", "pcie.link.gen.max": "4", "utilization.gpu": "0"}
    assert cause_pcie_words(idle) is None  # idle links downshift (the XML captures: gen 1 at rest)
    assert (
        cause_pcie_words({**idle, "utilization.gpu": "97"}) == "PCIe link gen1 of gen4 under load"
    )
    # The RTX 4080 capture: a gen4 GPU whose host allows gen5 is at its best at gen4.
    (rtx,) = cause_csv_rows((DATA / "csv_rtx-4080-super_query-gpu.csv").read_text(errors="replace"))
    assert cause_pcie_words(rtx) is None
    slot = {**base, "pcie.link.gen.current": "3", "pcie.link.gen.max": "4"}
    assert cause_pcie_words({**slot, "pcie.link.gen.hostmax": "3", "utilization.gpu": "99"}) is None
    narrow = {**slot, "pcie.link.width.current": "4", "utilization.gpu": "0"}
    assert cause_pcie_words(narrow) == "PCIe link x4 of x16 (gen3 of gen4)"


def test_foreign_processes_on_the_ranks_gpu() -> None:
    apps = cause_csv_rows((DATA / "csv_h200_compute-apps.csv").read_text(errors="replace"))
    (row,) = cause_csv_rows(REAL.read_text(errors="replace"))
    assert cause_foreign_pids(apps, row, lambda pid: pid == 10309) == [10291, 10293]
    other_gpu = {**row, "uuid": "GPU-other", "pci.bus_id": "00000000:84:00.0"}
    assert cause_foreign_pids(apps, other_gpu, lambda pid: False) == []


# cgroup v1 `cpu` controller text as this machine's kernel writes it, and cgroup v2's.
V1_BEFORE = "nr_periods 20\nnr_throttled 20\nthrottled_time 1559509672\nnr_bursts 0\nburst_time 0\n"
V1_AFTER = "nr_periods 30\nnr_throttled 30\nthrottled_time 2299509672\nnr_bursts 0\nburst_time 0\n"
V2_BEFORE = (
    "usage_usec 5000\nuser_usec 4000\nnr_periods 10\nnr_throttled 2\nthrottled_usec 100000\n"
)
V2_AFTER = (
    "usage_usec 9000\nuser_usec 7000\nnr_periods 20\nnr_throttled 12\nthrottled_usec 840000\n"
)


def test_cpu_stat_throttling_v1_and_v2() -> None:
    v1 = cause_throttled_fraction(cause_parse_keyed(V1_BEFORE), cause_parse_keyed(V1_AFTER), 1.0)
    assert v1 == pytest.approx(0.74)
    v2 = cause_throttled_fraction(cause_parse_keyed(V2_BEFORE), cause_parse_keyed(V2_AFTER), 1.0)
    assert v2 == pytest.approx(0.74)
    assert cause_throttle_words(0.74, "/sys/fs/cgroup/cpu/x") == (
        "CPU: cgroup quota throttled 74% of the time (/sys/fs/cgroup/cpu/x)"
    )
    assert cause_throttle_words(0.02, "/sys/fs/cgroup/cpu/x") is None
    assert cause_throttled_fraction({}, cause_parse_keyed("nr_periods 4\n"), 1.0) is None
    # Odd bytes (decoded with replacement) and odd lines are skipped, not fatal.
    assert cause_parse_keyed("nr_periods \ufffd\nthrottled_usec 12\ngarbage\n") == {
        "throttled_usec": 12
    }


def test_the_ranks_cgroup_and_its_parents_from_proc_text() -> None:
    mountinfo = (
        "30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw\n"
        "31 25 0:27 / /sys/fs/cgroup/cpu rw,nosuid shared:10 - cgroup cgroup rw,cpu\n"
        "32 25 0:28 / /sys/fs/cgroup/cpuacct rw,nosuid shared:11 - cgroup cgroup rw,cpuacct\n"
    )
    mounts = cause_cpu_mounts(mountinfo)
    assert mounts == {"v2": "/sys/fs/cgroup/unified", "v1": "/sys/fs/cgroup/cpu"}
    dirs = cause_cgroup_dirs("2:cpuacct:/\n1:cpu:/jobs/r0\n0::/\n", mounts)
    assert dirs[:3] == [
        "/sys/fs/cgroup/cpu/jobs/r0",
        "/sys/fs/cgroup/cpu/jobs",
        "/sys/fs/cgroup/cpu",
    ]
    pure_v2 = cause_cgroup_dirs("0::/user.slice/job.scope\n", {"v2": "/sys/fs/cgroup"})
    assert pure_v2 == [
        "/sys/fs/cgroup/user.slice/job.scope",
        "/sys/fs/cgroup/user.slice",
        "/sys/fs/cgroup",
    ]


def test_load_and_swapping_in_words() -> None:
    assert (
        cause_load_words("25.55 7.24 3.32 53/380 10646\n", 2)
        == "CPU: host saturated, load 25.6 on 2 cores"
    )
    assert cause_load_words("1.10 0.50 0.20 1/100 42\n", 2) is None
    assert cause_load_words("\ufffd", 2) is None
    before = cause_parse_keyed("nr_free_pages 1000\npswpin 100\npswpout 50\n")
    after = cause_parse_keyed("nr_free_pages 900\npswpin 340\npswpout 130\n")
    assert cause_swap_words(before, after, 2.0) == "memory: swapping 120 pages/s in, 40 out"
    assert cause_swap_words(before, before, 2.0) is None
    assert cause_swap_words({}, after, 2.0) is None


def _busy(env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "while True: pass"], env=env, start_new_session=True
    )


def _end(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait()


@pytest.fixture()
def quota_cgroup() -> Iterator[Path]:
    """A real cgroup v1 ``cpu`` group with a quota of 0.01 CPU (small enough to bite on a
    loaded machine)."""
    root = Path("/sys/fs/cgroup/cpu")
    if not (root / "cpu.cfs_quota_us").exists() or not os.access(root, os.W_OK):
        pytest.skip("needs cgroup v1's cpu controller, writable (root)")
    group = root / f"distconsole-test-causes-{os.getpid()}"
    group.mkdir()
    try:
        (group / "cpu.cfs_quota_us").write_text("1000")
        yield group
    finally:
        deadline = time.time() + 30
        while group.exists():
            try:
                group.rmdir()
            except OSError:  # its last process not reaped yet
                if time.time() > deadline:
                    raise
                time.sleep(0.1)


def test_a_rank_under_a_cpu_quota_is_named_with_its_cgroup(quota_cgroup: Path) -> None:
    rank = _busy()
    try:
        (quota_cgroup / "cgroup.procs").write_text(str(rank.pid))
        found, _unread = causes.rank_causes(rank.pid, None, sample_s=1.0)
    finally:
        _end(rank)
    cpu = [w for w in found if w.startswith("CPU: cgroup quota throttled")]
    assert cpu, found
    assert f"({quota_cgroup}, quota 0.01 CPU)" in cpu[0]


def test_gpu_causes_read_live_through_the_standin(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rank = _busy({**os.environ, "DISTCONSOLE_JOB_ID": "job-a"})
    same_job = _busy({**os.environ, "DISTCONSOLE_JOB_ID": "job-a"})
    other = _busy({k: v for k, v in os.environ.items() if k != "DISTCONSOLE_JOB_ID"})
    try:
        pids = tmp_path / "pids"
        pids.write_text(f"{rank.pid}\n{same_job.pid}\n{other.pid}\n")  # the capture's 3 rows
        monkeypatch.setenv("PATH", f"{STANDIN}:{os.environ['PATH']}")
        monkeypatch.setenv("NVSMI_STANDIN_CAPTURE", str(DATA / "csv_h200-slow"))
        monkeypatch.setenv("NVSMI_STANDIN_PIDS_FILE", str(pids))
        found, unread = causes.rank_causes(rank.pid, 0, sample_s=0.2)
        text = causes.rank_cause(rank.pid, 0, sample_s=0.2)
    finally:
        for proc in (rank, same_job, other):
            _end(proc)
    assert found[:3] == [
        "GPU 0 clocks throttled: thermal slowdown",
        "GPU 0 PCIe link x4 of x16",
        f"GPU 0 shared with pid {other.pid} (user root)" if os.geteuid() == 0 else found[2],
    ]
    assert not [u for u in unread if u.startswith("GPU")]
    assert text.startswith("GPU 0 clocks throttled: thermal slowdown; GPU 0 PCIe link x4 of x16")


def test_nothing_readable_is_unknown_never_ok(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi here
    found, unread = causes.rank_causes(gone.pid, 3, sample_s=0.0)
    assert any(u.startswith("GPU 3 (") for u in unread), unread
    assert any(u.startswith("cgroup CPU quota") for u in unread), unread
    assert not [w for w in found if w.startswith("GPU")]
    monkeypatch.setattr(causes.os, "cpu_count", lambda: 10_000)  # no load can saturate it
    assert causes.rank_cause(gone.pid, 3, sample_s=0.0) == "unknown"


def test_ranks_asked_at_once_share_one_nvidia_smi_answer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The supervisor asks for each rank in a thread of its own: all get the GPU's
    reading (none finds nvidia-smi "not answering" behind another's query), from one
    nvidia-smi run per query."""
    calls = tmp_path / "calls"
    wrapper = tmp_path / "nvidia-smi"
    wrapper.write_text(f'#!/bin/sh\necho "$1" >> {calls}\nexec {STANDIN / "nvidia-smi"} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("NVSMI_STANDIN_CAPTURE", str(DATA / "csv_h200-slow"))
    results: list[tuple[list[str], list[str]]] = []
    threads = [
        threading.Thread(target=lambda: results.append(causes.rank_causes(os.getpid(), 0, 0.0)))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(results) == 4
    for found, unread in results:
        assert "GPU 0 clocks throttled: thermal slowdown" in found, (found, unread)
    asked = calls.read_text().splitlines()
    assert sorted(a.split("=")[0] for a in asked) == ["--query-compute-apps", "--query-gpu"]
