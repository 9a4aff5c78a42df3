"""One verdict per GPU (``console/probe/health.py``): pure rules over decoded samples."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from console.probe.health import (
    HealthTracker,
    clock,
    cluster_verdicts,
    failure_health_lines,
    health_events,
    host_verdicts,
    worst,
    xid_words,
)
from console.probe.health_models import GpuHealth, HostHealth, XidEvent
from console.probe.models import GpuSample, HostSample, HostView
from console.transport.base import HostState

NOW = 1_800_000_000.0


def view(health: HostHealth | None, *gpus: GpuSample, state: HostState = HostState.UP) -> HostView:
    sample = HostSample("n1", NOW, "nvml", gpus=gpus or (GpuSample(0),), health=health)
    return HostView("n1", state, "", sample)


def healthy(index: int = 0, **kw: Any) -> GpuHealth:
    base = GpuHealth(
        index,
        "00000000:83:00.0",
        0,
        0,
        0,
        0,
        "No",
        "No",
        "No",
        None,
        0,
        5,
        5,
        16,
        16,
        None,
    )
    return replace(base, **kw)


def one(v: HostView, tracker: HealthTracker | None = None) -> tuple[str, tuple[str, ...]]:
    (row,) = [r for r in host_verdicts(v, NOW, tracker) if r.gpu == 0]
    return row.state, row.reasons


def test_a_healthy_gpu_is_ok_with_no_reasons() -> None:
    assert one(view(HostHealth("nvml", NOW, (healthy(),)))) == ("ok", ())


def test_fail_reasons() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"ecc_uncorrected_volatile": 3}, "3 uncorrectable ECC error(s) since the last reset"),
        ({"remapped_rows_pending": "Yes"}, "row remap pending (reset the GPU)"),
        ({"remapped_rows_failure": "Yes"}, "row remapping failed"),
        ({"retired_pages_pending": "Yes"}, "retired pages pending (reset the GPU)"),
        ({"recovery_action": "GPU Reset"}, "recovery action: GPU Reset"),
    ]
    for kw, words in cases:
        assert one(view(HostHealth("nvml", NOW, (healthy(**kw),)))) == ("fail", (words,)), kw


def test_warn_reasons() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"ecc_uncorrected_aggregate": 1}, "1 uncorrectable ECC error(s) in its lifetime"),
        ({"clock_events": 0x40 | 0x1}, "clocks slowed: HW thermal slowdown"),
        ({"clock_events": 0x08 | 0x80}, "clocks slowed: HW slowdown, HW power brake"),
        ({"pcie_width": 8}, "PCIe link x8 of x16"),
        ({"fan": "ERR!"}, "fan error"),
        ({"nvlink_active": 16, "nvlink_inactive": 2}, "2 of 18 NVLink links down"),
    ]
    for kw, words in cases:
        assert one(view(HostHealth("nvml", NOW, (healthy(**kw),)))) == ("warn", (words,)), kw
    assert one(view(None, GpuSample(0, temperature_c=91))) == ("warn", ("hot (91 C)",))


def test_pcie_gen_below_max_counts_only_under_load() -> None:
    health = HostHealth("nvml", NOW, (healthy(pcie_gen=1),))
    assert one(view(health, GpuSample(0, utilization_gpu=0)))[0] == "ok"  # idle links downshift
    assert one(view(health, GpuSample(0, utilization_gpu=97))) == (
        "warn",
        ("PCIe gen 1 of 5 under load",),
    )


def test_xids_by_gpu_critical_fails_recent_only_and_others_warn() -> None:
    xids = (
        XidEvent(NOW - 10, 79, "0000:83:00", 0, "GPU has fallen off the bus.", "kmsg"),
        XidEvent(NOW - 5, 13, "0000:84:00", 1, "", "kmsg"),
        XidEvent(NOW - 7200, 48, "0000:85:00", 2, "", "kmsg"),
    )
    health = HostHealth("nvml", NOW, (healthy(0), healthy(1), healthy(2)), xids)
    rows = {
        r.gpu: r for r in host_verdicts(view(health, GpuSample(0), GpuSample(1), GpuSample(2)), NOW)
    }
    assert rows[0].state == "fail" and rows[0].since == NOW - 10
    assert rows[0].reasons[0].startswith("Xid 79 (GPU has fallen off the bus) at ")
    assert rows[1].state == "warn" and rows[1].reasons[0].startswith("Xid 13 (graphics engine")
    assert rows[2].state == "warn"  # a critical Xid two hours old: warned, no longer failing
    assert xid_words(999) == "Xid 999"


def test_an_xid_on_an_unknown_pci_address_is_a_host_warning() -> None:
    health = HostHealth(
        "nvml", NOW, (healthy(),), (XidEvent(NOW, 79, "0000:99:00", None, "", "kmsg"),)
    )
    rows = host_verdicts(view(health), NOW)
    host = next(r for r in rows if r.gpu is None)
    # It warns (no GPU a job could use has that address now) ...
    assert host.state == "warn" and "on PCI 0000:99:00" in host.reasons[0]
    # ... and on a host with no GPU reader at all (no driver, no nvidia-smi), says nothing.
    lone = HostHealth(None, None, (), health.xids)
    bare = HostSample("n1", NOW, "none", gpu_error="no NVIDIA GPU", health=lone)
    (row,) = host_verdicts(HostView("n1", HostState.UP, "", bare), NOW)
    assert (row.state, row.reasons) == ("ok", ("no NVIDIA GPU",))


def test_host_level_rows_down_not_answering_and_no_gpu() -> None:
    down = HostView("n1", HostState.DOWN, "connection refused", None, last_seen=NOW - 60)
    (row,) = host_verdicts(down, NOW)
    assert (row.gpu, row.state, row.reasons, row.since) == (
        None,
        "fail",
        ("host down: connection refused",),
        NOW - 60,
    )
    hung = HostHealth("nvidia-smi", None, error="nvidia-smi not answering", error_since=NOW - 12)
    sample = HostSample("n1", NOW, "nvidia-smi", gpu_error="nvidia-smi not answering", health=hung)
    (row,) = host_verdicts(HostView("n1", HostState.UP, "", sample), NOW)
    assert (row.state, row.reasons, row.since) == ("fail", ("nvidia-smi not answering",), NOW - 12)
    cpu = HostSample("n1", NOW, "none", gpu_error="no NVIDIA GPU: nvidia-smi not found")
    (row,) = host_verdicts(HostView("n1", HostState.UP, "", cpu), NOW)
    assert row.state == "ok" and row.gpu is None
    assert worst(cluster_verdicts([down, HostView("n1", HostState.UP, "", cpu)], NOW)) == "fail"


def test_tracker_keeps_since_and_sees_corrected_ecc_rising() -> None:
    tracker = HealthTracker()
    first = view(HostHealth("nvml", NOW, (healthy(ecc_corrected_aggregate=10, pcie_width=8),)))
    (row,) = host_verdicts(first, NOW, tracker)
    assert (row.state, row.since) == ("warn", NOW)
    later = view(HostHealth("nvml", NOW, (healthy(ecc_corrected_aggregate=14, pcie_width=8),)))
    (row,) = host_verdicts(later, NOW + 60, tracker)
    assert row.since == NOW  # still the first time the narrow link was seen
    assert any(r.startswith("corrected ECC errors rising (+4 since") for r in row.reasons)
    narrow = view(HostHealth("nvml", NOW, (healthy(pcie_width=8),)))
    host_verdicts(view(HostHealth("nvml", NOW, (healthy(),))), NOW + 120, tracker)
    (row,) = host_verdicts(narrow, NOW + 180, tracker)
    assert row.since == NOW + 180  # the condition cleared in between: a new since


def test_health_events_are_dated_oldest_first() -> None:
    xids = (XidEvent(NOW - 30, 79, "0000:83:00", 0, "GPU has fallen off the bus.", "kmsg"),)
    health = HostHealth("nvml", NOW, (healthy(remapped_rows_pending="Yes"),), xids)
    events = health_events(view(health), NOW)
    assert [e.text for e in events] == [
        "Xid 79 (GPU has fallen off the bus): GPU has fallen off the bus.",
        "row remap pending (reset the GPU)",
    ]
    assert events[0].time == NOW - 30 and events[0].state == "fail" and events[0].gpu == 0


def test_failure_summary_names_dated_events_in_the_window_and_failures_found_at_the_end() -> None:
    xids = (
        XidEvent(NOW - 2, 79, "0000:83:00", 0, "GPU has fallen off the bus.", "kmsg"),
        XidEvent(NOW - 86400, 48, "0000:83:00", 0, "DBE", "kmsg"),  # a day before: not named
    )
    health = HostHealth("nvml", NOW + 5, (healthy(remapped_rows_pending="Yes"),), xids)
    lines = failure_health_lines(
        [view(health)], NOW - 600, NOW, "n1 torchrun-0 (rank 29)", now=NOW + 5
    )
    assert lines == [
        f"n1 GPU 0: Xid 79 (GPU has fallen off the bus): GPU has fallen off the bus. at "
        f"{clock(NOW - 2)}, 2 s before n1 torchrun-0 (rank 29) exited",
        "n1 GPU 0: row remap pending (reset the GPU) (found when the job ended)",
    ]
    assert failure_health_lines([view(HostHealth("nvml", NOW, (healthy(),)))], 0, NOW, "x") == []


def test_a_reader_error_that_is_not_a_hang_only_warns() -> None:
    broken = HostHealth("nvidia-smi", None, error="No devices were found", error_since=NOW)
    sample = HostSample("n1", NOW, "nvidia-smi", gpu_error="No devices were found", health=broken)
    (row,) = host_verdicts(HostView("n1", HostState.UP, "", sample), NOW)
    assert (row.gpu, row.state, row.reasons) == (None, "warn", ("No devices were found",))
