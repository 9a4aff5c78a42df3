"""The rules that turn validate's figures into verdicts (pure functions, no I/O).

Per host (``gpu: None``) and per GPU: a figure ``warn`` fraction or more below the fleet's
median for that figure -> warn, ``fail`` fraction or more below -> fail; a GPU figure
below the expected share of its model's datasheet peak -> warn, below half of that ->
fail (:mod:`console.validate.expected`); a CPU quota below the threads measured, or
throttling in many periods -> warn naming the quota; a host whose program failed -> fail.
Links: a pair whose bus bandwidth is ``warn`` or more below the median pair is slow; it
is a slow *link* when both its hosts are fine in a pair with another host; a host slow in
every one of its pairs is itself the slow one (a reason on the host's row).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from console.validate.expected import FRACTION, peak_for, peak_value
from console.validate.schedule import Pair

State = Literal["ok", "warn", "fail"]
RANK: dict[str, int] = {"ok": 0, "warn": 1, "fail": 2}
HOST_FIGURES = {
    "cpu_gflops": "CPU fp32 matmul",
    "mem_gbps": "memory copy",
    "nccl_busbw_gbps": "NCCL all-reduce across its GPUs",
}
GPU_FIGURES = {
    "matmul_tflops": "bf16 matmul",
    "dev_mem_gbps": "device memory copy",
    "h2d_gbps": "host->device copy",
    "d2h_gbps": "device->host copy",
}
UNITS = {
    "cpu_gflops": "GFLOPS",
    "mem_gbps": "GB/s",
    "nccl_busbw_gbps": "GB/s",
    "matmul_tflops": "TFLOPS",
    "dev_mem_gbps": "GB/s",
    "h2d_gbps": "GB/s",
    "d2h_gbps": "GB/s",
    "busbw_gbps": "GB/s",
}
THROTTLED_WARN = 0.2  # share of the cgroup's periods throttled while the CPU test ran


@dataclass(frozen=True, slots=True)
class Thresholds:
    warn: float = 0.25  # this fraction or more below the fleet median -> warn
    fail: float = 0.5  # -> fail


@dataclass(frozen=True, slots=True)
class HostResult:
    """What one host's compute program answered (``error`` when it could not run)."""

    host: str
    figures: Mapping[str, Any] = field(default_factory=dict)
    gpus: Sequence[Mapping[str, Any]] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Row:
    host: str
    gpu: int | None
    state: State
    reasons: tuple[str, ...] = ()
    figures: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "gpu": self.gpu,
            "state": self.state,
            "reasons": list(self.reasons),
            "figures": dict(self.figures),
        }


@dataclass(frozen=True, slots=True)
class LinkRow:
    hosts: Pair
    busbw_gbps: float
    state: State
    reasons: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "hosts": list(self.hosts),
            "busbw_gbps": self.busbw_gbps,
            "state": self.state,
            "reasons": list(self.reasons),
        }


def worst(states: Sequence[State]) -> State:
    return max(states, key=lambda s: RANK[s], default="ok")


def below_median(
    value: float, fleet: Sequence[float], t: Thresholds
) -> tuple[State, float, float] | None:
    """(state, fraction below, median) when ``value`` is warn-far below the median."""
    if len(fleet) < 2:
        return None  # one host has no fleet to be compared with
    mid = float(statistics.median(fleet))
    if mid <= 0:
        return None
    short = 1.0 - value / mid
    if short >= t.fail:
        return "fail", short, mid
    if short >= t.warn:
        return "warn", short, mid
    return None


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def fleet_reasons(
    figures: Mapping[str, Any],
    names: Mapping[str, str],
    fleet: Mapping[str, Sequence[float]],
    t: Thresholds,
) -> list[tuple[State, str]]:
    found: list[tuple[State, str]] = []
    for key, words in names.items():
        value = figures.get(key)
        if not isinstance(value, int | float):
            continue
        judged = below_median(float(value), fleet.get(key, ()), t)
        if judged:
            state, short, mid = judged
            unit = UNITS[key]
            found.append(
                (
                    state,
                    f"{words} {_fmt(value)} {unit} is {short:.0%} below the fleet median "
                    f"{_fmt(mid)} {unit}",
                )
            )
    return found


def quota_reasons(figures: Mapping[str, Any]) -> list[tuple[State, str]]:
    quota = figures.get("cpu_quota_cpus")
    threads = figures.get("cpu_threads") or 1
    throttled = figures.get("cpu_throttled_fraction")
    if isinstance(quota, int | float) and quota < threads:
        share = f"; throttled in {throttled:.0%} of its periods" if throttled else ""
        return [
            (
                "warn",
                f"CPU limited by a cgroup quota to {quota:g} CPU (cpu.cfs_quota_us / "
                f"cpu.cfs_period_us), below the {threads} thread(s) measured{share}",
            )
        ]
    if isinstance(throttled, int | float) and throttled >= THROTTLED_WARN:
        return [("warn", f"CPU throttled by its cgroup in {throttled:.0%} of its periods")]
    return []


def peak_reasons(gpu: Mapping[str, Any]) -> list[tuple[State, str]]:
    peak = peak_for(str(gpu.get("name", "")))
    if peak is None:
        return []
    found: list[tuple[State, str]] = []
    for key, words in GPU_FIGURES.items():
        value, top = gpu.get(key), peak_value(peak, key)
        if not isinstance(value, int | float) or not top:
            continue
        share, wanted = value / top, FRACTION[key]
        if share < wanted:
            state: State = "fail" if share < wanted / 2 else "warn"
            found.append(
                (
                    state,
                    f"{words} {_fmt(value)} {UNITS[key]} is {share:.0%} of the {peak.model}'s "
                    f"datasheet peak {_fmt(top)} (expected >= {wanted:.0%}; {peak.source})",
                )
            )
    return found


def _row(host: str, gpu: int | None, found: list[tuple[State, str]], figures: Any) -> Row:
    return Row(host, gpu, worst([s for s, _ in found]), tuple(r for _, r in found), figures)


def judge_hosts(
    results: Sequence[HostResult],
    t: Thresholds = Thresholds(),
    host_links: Mapping[str, tuple[State, str]] | None = None,
) -> list[Row]:
    """One row per host (``gpu: None``) and one per GPU, in the results' order."""
    ran = [r for r in results if r.error is None]
    host_fleet = {k: [float(r.figures[k]) for r in ran if k in r.figures] for k in HOST_FIGURES}
    gpus = [g for r in ran for g in r.gpus]
    gpu_fleet = {k: [float(g[k]) for g in gpus if k in g] for k in GPU_FIGURES}
    rows: list[Row] = []
    for result in results:
        if result.error is not None:
            rows.append(Row(result.host, None, "fail", (result.error,)))
            continue
        found = fleet_reasons(result.figures, HOST_FIGURES, host_fleet, t)
        found += quota_reasons(result.figures)
        if host_links and result.host in host_links:
            found.append(host_links[result.host])
        rows.append(_row(result.host, None, found, result.figures))
        for index, gpu in enumerate(result.gpus):
            found = fleet_reasons(gpu, GPU_FIGURES, gpu_fleet, t) + peak_reasons(gpu)
            rows.append(_row(result.host, index, found, gpu))
    return rows


def judge_links(
    pairs: Mapping[Pair, float], t: Thresholds = Thresholds()
) -> tuple[list[LinkRow], dict[str, tuple[State, str]]]:
    """Link rows for every measured pair, and reasons for hosts slow in all their pairs."""
    if not pairs:
        return [], {}
    mid = float(statistics.median(pairs.values()))
    slow = {p: below_median(bw, list(pairs.values()), t) for p, bw in pairs.items()}
    hosts = sorted({h for p in pairs for h in p})
    fine_with_other = {h: any(h in p and not slow[p] for p in pairs) for h in hosts}
    host_reasons: dict[str, tuple[State, str]] = {}
    for host in hosts:
        own = [p for p in pairs if host in p]
        if len(own) >= 2 and all(slow[p] for p in own):
            states = [slow[p][0] for p in own if slow[p]]  # type: ignore[index]
            best = max(pairs[p] for p in own)
            host_reasons[host] = (
                "fail" if all(s == "fail" for s in states) else "warn",
                f"gloo all-reduce with every partner is slow (best {_fmt(best)} GB/s, "
                f"median pair {_fmt(mid)} GB/s): the host, not one link",
            )
    rows: list[LinkRow] = []
    for pair, bw in pairs.items():
        judged = slow[pair]
        if not judged:
            rows.append(LinkRow(pair, bw, "ok"))
            continue
        state, short, _ = judged
        a, b = pair
        if fine_with_other[a] and fine_with_other[b]:
            reason = (
                f"slow link: {a}<->{b} {_fmt(bw)} GB/s is {short:.0%} below the median pair "
                f"{_fmt(mid)} GB/s while both hosts are fine with others"
            )
            rows.append(LinkRow(pair, bw, state, (reason,)))
        else:
            who = ", ".join(h for h in pair if not fine_with_other[h]) or "a host"
            reason = f"{_fmt(bw)} GB/s is {short:.0%} below the median pair: {who} is slow"
            rows.append(LinkRow(pair, bw, "warn", (reason,)))
    return rows, host_reasons


def slow_pairs(pairs: Mapping[Pair, float], t: Thresholds = Thresholds()) -> list[Pair]:
    values = list(pairs.values())
    return [p for p, bw in pairs.items() if below_median(bw, values, t)]
