"""One verdict per GPU: ``ok``, ``warn`` or ``fail``, with the reasons in words and since
when, drawn from a host's samples (pure: no I/O; the "since when" of a condition the
samples do not date is kept by a :class:`HealthTracker` the caller holds).

fail: uncorrectable ECC errors since the last reset, a row remap pending or failed,
retired pages pending, a recovery action other than none, a critical Xid on it in the
last ``XID_FAIL_WINDOW_S``; a host-level row (``gpu`` None) for a host that is down, gave no
sample, or whose nvidia-smi / NVML does not answer (another reader error warns, and so
does a reader thread that died: what it would have seen is unknown). warn:
clocks slowed by the hardware (slowdown, thermal, power brake) or software thermal, a
PCIe link narrower than its maximum (or slower under load), corrected ECC errors rising,
uncorrectable ECC errors in the board's lifetime, a fan error, NVLink links down, hot,
other Xids. The fail rules (and the Xid names) are
``console/hostprogs/sampler/health_rules.py``'s: a job supervisor's drain ships the same.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from console.hostprogs.sampler.health_rules import (
    CRITICAL_XIDS,
    gpu_fail_reasons,
    reader_hung,
    xid_fails,
    xid_words,
)
from console.probe.health_models import GpuHealth, HostHealth, XidEvent
from console.probe.models import GpuSample, HostView

State = Literal["ok", "warn", "fail"]
RANK: dict[str, int] = {"ok": 0, "warn": 1, "fail": 2}

HOT_C = 85.0  # a GPU at or above this is "hot" (H100/H200 slow down from ~87 C)
LOADED_PERCENT = 50.0  # PCIe gen below max only counts under load (idle links downshift)
# NVML clocks event reasons that mean something is wrong (not idle or power capping).
CLOCK_EVENTS: tuple[tuple[int, str], ...] = (
    (0x08, "HW slowdown"),
    (0x40, "HW thermal slowdown"),
    (0x80, "HW power brake"),
    (0x20, "SW thermal slowdown"),
)


@dataclass(frozen=True, slots=True)
class GpuVerdict:
    host: str
    gpu: int | None  # None: about the host (down, not answering)
    state: State
    reasons: tuple[str, ...] = ()
    since: float | None = None  # epoch seconds the worst reason was first seen

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "gpu": self.gpu,
            "state": self.state,
            "reasons": list(self.reasons),
            "since": self.since,
        }


@dataclass(frozen=True, slots=True)
class HealthEvent:
    """A dated health event for a host's detail and a failure summary."""

    time: float
    host: str
    gpu: int | None
    state: State
    text: str


def clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


class HealthTracker:
    """When each condition was first seen (it resets once the condition clears), and each
    GPU's first corrected-ECC count, so that "rising" and "since" survive samples."""

    def __init__(self) -> None:
        self._first: dict[tuple[str, int | None], dict[str, float]] = {}
        self._ecc: dict[tuple[str, int], tuple[int, float]] = {}

    def since(
        self, host: str, gpu: int | None, keys: Iterable[str], now: float
    ) -> dict[str, float]:
        seen = self._first.get((host, gpu), {})
        kept = {k: seen.get(k, now) for k in keys}
        self._first[(host, gpu)] = kept
        return kept

    def corrected_growth(self, host: str, gpu: int, count: int, now: float) -> tuple[int, float]:
        first = self._ecc.setdefault((host, gpu), (count, now))
        if count < first[0]:  # counters reset (a GPU reset, a driver reload)
            self._ecc[(host, gpu)] = first = (count, now)
        return count - first[0], first[1]


Found = tuple[State, str, str, float | None]  # state, key, reason, since (None: tracker's)


def _health_findings(h: GpuHealth, utilization: float | None) -> list[Found]:
    # The fail rules are the hosts' too (a supervisor's drain): health_rules.py.
    out: list[Found] = [
        ("fail", k, why, None) for k, why in gpu_fail_reasons(lambda a: getattr(h, a))
    ]
    if not h.ecc_uncorrected_volatile and h.ecc_uncorrected_aggregate:
        n = h.ecc_uncorrected_aggregate
        out.append(("warn", "ecc-life", f"{n} uncorrectable ECC error(s) in its lifetime", None))
    slowed = [name for bit, name in CLOCK_EVENTS if (h.clock_events or 0) & bit]
    if slowed:
        out.append(("warn", "clocks", "clocks slowed: " + ", ".join(slowed), None))
    if h.pcie_width and h.pcie_width_max and h.pcie_width < h.pcie_width_max:
        text = f"PCIe link x{h.pcie_width} of x{h.pcie_width_max}"
        out.append(("warn", "pcie-width", text, None))
    loaded = utilization is not None and utilization >= LOADED_PERCENT
    if loaded and h.pcie_gen and h.pcie_gen_max and h.pcie_gen < h.pcie_gen_max:
        text = f"PCIe gen {h.pcie_gen} of {h.pcie_gen_max} under load"
        out.append(("warn", "pcie-gen", text, None))
    if h.fan == "ERR!":
        out.append(("warn", "fan", "fan error", None))
    if h.nvlink_inactive:
        total = h.nvlink_inactive + (h.nvlink_active or 0)
        out.append(("warn", "nvlink", f"{h.nvlink_inactive} of {total} NVLink links down", None))
    return out


def _xid_findings(xids: Iterable[XidEvent], now: float) -> list[Found]:
    out: list[Found] = []
    for x in xids:
        # An Xid on a PCI address none of the host's GPUs has now only warns: the GPU
        # it named is not among those a job could be placed on.
        critical = xid_fails(x.xid, x.time, now) and x.gpu is not None
        state: State = "fail" if critical else "warn"
        where = "" if x.gpu is not None or not x.pci else f" on PCI {x.pci}"
        out.append((state, f"xid-{x.xid}", f"{xid_words(x.xid)}{where} at {clock(x.time)}", x.time))
    return out


def _verdict(
    host: str,
    gpu: int | None,
    found: Sequence[Found],
    now: float,
    tracker: HealthTracker | None,
) -> GpuVerdict:
    if not found:
        if tracker is not None:
            tracker.since(host, gpu, (), now)
        return GpuVerdict(host, gpu, "ok")
    keys = [f[1] for f in found]
    first = tracker.since(host, gpu, keys, now) if tracker is not None else {}
    worst = max(found, key=lambda f: RANK[f[0]])[0]
    ordered = sorted(found, key=lambda f: -RANK[f[0]])
    reasons = tuple(dict.fromkeys(f[2] for f in ordered))
    times = [f[3] if f[3] is not None else first.get(f[1], now) for f in found if f[0] == worst]
    return GpuVerdict(host, gpu, worst, reasons, min(times))


def _host_row(view: HostView, now: float, tracker: HealthTracker | None) -> GpuVerdict | None:
    s = view.sample
    if not view.up:
        why = f"host {view.state.value}" + (f": {view.reason}" if view.reason else "")
        return _verdict(view.name, None, [("fail", "down", why, view.last_seen)], now, tracker)
    if s is None:
        why = "no sample" + (f": {view.reason}" if view.reason else "")
        return _verdict(view.name, None, [("fail", "nosample", why, None)], now, tracker)
    health = s.health
    found: list[Found] = []
    if health is not None and health.error:
        # Not answering fails the host; another reader error (no driver loaded, "No
        # devices were found") warns with its words: the GPU figures say the rest.
        state: State = "fail" if reader_hung(health.error) else "warn"
        found.append((state, "hung", health.error, health.error_since))
    elif s.gpu_error and reader_hung(s.gpu_error):
        found.append(("fail", "hung", s.gpu_error, None))
    if view.stale:
        found.append(("warn", "stale", f"sampler silent ({view.reason or 'stale'})", None))
    for reader, error in health.readers if health is not None else ():
        why = f"health reader {reader!r} failed ({error}): its findings are unknown"
        found.append(("warn", f"reader-{reader}", why, None))
    if health is not None and s.gpu_source != "none":  # no GPU reader: no GPU to name
        found += _xid_findings((x for x in health.xids if x.gpu is None), now)
    if found:
        return _verdict(view.name, None, found, now, tracker)
    if not s.gpus and not (health and health.gpus):
        return GpuVerdict(view.name, None, "ok", (s.gpu_error or "no GPU",) if s.gpu_error else ())
    return None


def host_verdicts(
    view: HostView, now: float | None = None, tracker: HealthTracker | None = None
) -> list[GpuVerdict]:
    """Every GPU's verdict on one host (and a host-level row when there is a finding
    about the host itself, or no GPU to judge)."""
    now = time.time() if now is None else now
    out: list[GpuVerdict] = []
    row = _host_row(view, now, tracker)
    if row is not None:
        out.append(row)
    s = view.sample
    if s is None or not view.up:
        return out
    health: HostHealth | None = s.health
    samples = {g.index: g for g in s.gpus}
    indices = sorted(set(samples) | {g.index for g in health.gpus} if health else set(samples))
    for index in indices:
        gpu: GpuSample | None = samples.get(index)
        found: list[Found] = []
        h = health.gpu(index) if health is not None else None
        if h is not None:
            found += _health_findings(h, gpu.utilization_gpu if gpu else None)
            if h.ecc_corrected_aggregate is not None and tracker is not None:
                grew, since = tracker.corrected_growth(
                    view.name, index, h.ecc_corrected_aggregate, now
                )
                if grew > 0:
                    text = f"corrected ECC errors rising (+{grew} since {clock(since)})"
                    found.append(("warn", "ecc-rising", text, since))
        if gpu is not None and gpu.temperature_c is not None and gpu.temperature_c >= HOT_C:
            found.append(("warn", "hot", f"hot ({gpu.temperature_c:.0f} C)", None))
        if health is not None:
            found += _xid_findings((x for x in health.xids if x.gpu == index), now)
        out.append(_verdict(view.name, index, found, now, tracker))
    return out


def cluster_verdicts(
    views: Iterable[HostView], now: float | None = None, tracker: HealthTracker | None = None
) -> list[GpuVerdict]:
    return [v for view in views for v in host_verdicts(view, now, tracker)]


def worst(verdicts: Iterable[GpuVerdict]) -> State:
    return max((v.state for v in verdicts), key=RANK.__getitem__, default="ok")


def health_events(view: HostView, now: float | None = None) -> list[HealthEvent]:
    """A host's dated health events, oldest first: its Xids and its findings' starts."""
    now = time.time() if now is None else now
    s = view.sample
    events: list[HealthEvent] = []
    if s is not None and s.health is not None:
        for x in s.health.xids:
            state: State = "fail" if x.xid in CRITICAL_XIDS else "warn"
            text = xid_words(x.xid) + (f": {x.text}" if x.text else "")
            events.append(HealthEvent(x.time, view.name, x.gpu, state, text))
    health = s.health if s is not None else None
    for v in host_verdicts(view, now):
        if v.state == "ok" or s is None:
            continue
        for reason in v.reasons:
            if reason.startswith("Xid "):
                continue  # listed above, at its own time
            # A condition is dated when the reading saw it (no tracker here); a reader
            # that does not answer, from when it stopped.
            when = health.read_at if health is not None and health.read_at else s.time
            if health is not None and reason == health.error and health.error_since:
                when = health.error_since
            events.append(HealthEvent(when, view.name, v.gpu, v.state, reason))
    return sorted(events, key=lambda e: e.time)


def failure_health_lines(
    views: Iterable[HostView],
    started: float,
    failed_at: float,
    failed: str,
    now: float | None = None,
    found: str = "found when the job ended",
) -> list[str]:
    """What a failure summary says of the hardware: each dated health event on the job's
    hosts from its start to just after it failed ("node3 GPU 5: Xid 79 (GPU has fallen
    off the bus) at 12:03:11, 2 s before node3 torchrun-0 (rank 29) exited"), and each
    GPU failing now, when the job ended (its onset unknown: counters, remap state)."""
    now = time.time() if now is None else now
    lines: list[str] = []
    for view in views:
        events = health_events(view, now)
        s = view.sample
        read_at = (s.health.read_at or s.time) if s is not None and s.health else None
        for e in events:
            where = f"{e.host} {'host' if e.gpu is None else f'GPU {e.gpu}'}"
            dated = e.time != read_at
            if dated and started - 60 <= e.time <= failed_at + 30:
                gap = failed_at - e.time
                when = f"{abs(gap):.0f} s {'before' if gap >= 0 else 'after'} {failed} exited"
                lines.append(f"{where}: {e.text} at {clock(e.time)}, {when}")
            elif not dated and e.state == "fail":
                lines.append(f"{where}: {e.text} ({found})")
    return list(dict.fromkeys(lines))
