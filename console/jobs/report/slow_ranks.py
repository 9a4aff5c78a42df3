"""The slow-rank keys a job's leader supervisor records (issue 32), read for display.

``host_view`` (``discover.py``) carries the leader's ``slow_ranks`` (ranks slow now),
``rank_pace`` (every rank's latest window) and ``slow_periods`` (each slow spell, ``until``
None while it lasts). They come from files on the hosts: each entry is checked here and
one that is not what it should be is left out, never shown half. The screens, ``jobs``,
the report and ``/metrics`` read them through these functions and words. A ps job's
workers are scored on their step rates (``basis`` "steps", ``task`` "worker 1", and
``steps_per_s`` instead of busy/wait in ``rank_pace``): their words say so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from console.jobs.report.membership import when

MAX_ENTRIES = 4096  # of one list: more ranks than any job has


@dataclass(frozen=True, slots=True)
class SlowRank:
    rank: int
    host: str
    relative: float  # the rank's busy time / the median rank's (steps: the inverse rates)
    cause: str
    since: float  # epoch seconds
    task: str = ""  # a ps worker's task ("worker 1"); "" for a rank
    basis: str = "busy"  # or "steps": the median worker's step rate / this worker's


@dataclass(frozen=True, slots=True)
class RankPace:
    rank: int
    host: str
    busy: float | None  # fraction of the last window (None: a ps worker, scored on steps)
    wait: float | None
    relative: float
    window_end: float
    steps_per_s: float | None = None  # a ps worker's step rate in the window
    task: str = ""


@dataclass(frozen=True, slots=True)
class SlowPeriod:
    rank: int
    host: str
    since: float
    until: float | None  # None: still slow
    cause: str
    task: str = ""  # a ps worker's ("worker 1")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _entries(view: Mapping[str, Any] | None, key: str) -> list[Mapping[str, Any]]:
    items = (view or {}).get(key)
    if not isinstance(items, list):
        return []
    return [e for e in items[:MAX_ENTRIES] if isinstance(e, Mapping)]


def slow_ranks(view: Mapping[str, Any] | None) -> list[SlowRank]:
    """The ranks slow now, by rank."""
    out = []
    for e in _entries(view, "slow_ranks"):
        rank, host, rel = _int(e.get("rank")), _str(e.get("host")), _float(e.get("relative"))
        since = _float(e.get("since"))
        if rank is None or host is None or rel is None or since is None:
            continue
        cause = _str(e.get("cause")) or "unknown"
        basis = "steps" if e.get("basis") == "steps" else "busy"
        out.append(SlowRank(rank, host, rel, cause, since, _str(e.get("task")) or "", basis))
    return sorted(out, key=lambda s: s.rank)


def rank_pace(view: Mapping[str, Any] | None) -> list[RankPace]:
    """Every rank's latest window, by rank."""
    out = []
    for e in _entries(view, "rank_pace"):
        rank, host = _int(e.get("rank")), _str(e.get("host"))
        busy, wait, rel = _float(e.get("busy")), _float(e.get("wait")), _float(e.get("relative"))
        end, rate = _float(e.get("window_end")), _float(e.get("steps_per_s"))
        if None in (rank, host, rel, end) or (rate is None and None in (busy, wait)):
            continue
        task = _str(e.get("task")) or ""
        out.append(RankPace(rank, host, busy, wait, rel, end, rate, task))  # type: ignore[arg-type]
    return sorted(out, key=lambda p: p.rank)


def slow_periods(view: Mapping[str, Any] | None) -> list[SlowPeriod]:
    """Every slow spell the leader kept, oldest first."""
    out = []
    for e in _entries(view, "slow_periods"):
        rank, host, since = _int(e.get("rank")), _str(e.get("host")), _float(e.get("since"))
        until = _float(e.get("until"))
        if rank is None or host is None or since is None:
            continue
        if e.get("until") is not None and until is None:
            continue  # a value, but not a time
        cause, task = _str(e.get("cause")) or "unknown", _str(e.get("task")) or ""
        out.append(SlowPeriod(rank, host, since, until, cause, task))
    return sorted(out, key=lambda p: (p.since, p.rank))


def clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def who(s: SlowRank) -> str:
    """ "rank 2", or a ps worker's task: "worker 1"."""
    return s.task or f"rank {s.rank}"


def slow_mark(slow: list[SlowRank]) -> str:
    """ "slow: rank 2" / "slow: ranks 2, 5" / "slow: worker 1": the short mark beside a
    job's state."""
    if not slow:
        return ""
    if all(s.task for s in slow):
        tasks = ", ".join(s.task for s in slow[:4]) + (", ..." if len(slow) > 4 else "")
        return f"slow: {tasks}"
    ranks = ", ".join(str(s.rank) for s in slow[:4]) + (", ..." if len(slow) > 4 else "")
    return f"slow: rank{'s' if len(slow) > 1 else ''} {ranks}"


def slow_words(s: SlowRank) -> str:
    """ "rank 2 on node1 busy 1.8x the median since 07:31:02: CPU: cgroup quota ..."; a
    ps worker's: "worker 1 on node2 step time 2.0x the median since ...\""""
    measure = "step time" if s.basis == "steps" else "busy"
    pace = f"{measure} {s.relative:.1f}x the median since {clock(s.since)}"
    return f"{who(s)} on {s.host} {pace}: {s.cause}"


def slow_header(slow: list[SlowRank]) -> str:
    """The logs header's mark: "SLOW rank 2 on node1 1.8x (CPU: cgroup quota ...)"."""
    return "; ".join(f"SLOW {who(s)} on {s.host} {s.relative:.1f}x ({s.cause})" for s in slow)


def pace_source(
    view: Mapping[str, Any] | None, supervisor: Mapping[str, Any] | None
) -> Mapping[str, Any]:
    """The leader's own record when it holds the pace keys (a report's supervisor.json),
    else the history's view of it."""
    if supervisor and any(k in supervisor for k in ("rank_pace", "slow_periods", "slow_ranks")):
        return supervisor
    return view or {}


def pace_lines(source: Mapping[str, Any]) -> list[str]:
    """summary.txt's per-rank table of the leader's last window: busy and waiting shares,
    busy against the median rank; the ranks slow then marked."""
    pace = rank_pace(source)
    if not pace:
        return []
    slow = {s.rank for s in slow_ranks(source)}
    ended = max(p.window_end for p in pace)
    if any(p.steps_per_s is not None for p in pace):
        return rate_lines(pace, slow, ended)
    lines = [
        f"rank pace (the leader's last window, ended {clock(ended)}; busy vs the median rank):",
        f"  {'RANK':>4}  {'HOST':<16} {'BUSY':>5} {'WAIT':>5} {'RELATIVE':>8}",
    ]
    for p in pace:
        mark = "  SLOW" if p.rank in slow else ""
        lines.append(
            f"  {p.rank:>4}  {p.host:<16} {p.busy or 0:>5.0%} {p.wait or 0:>5.0%} "
            f"{p.relative:>7.2f}x{mark}"
        )
    return lines


def rate_lines(pace: list[RankPace], slow: set[int], ended: float) -> list[str]:
    """A ps job's table: each worker's step rate, the median worker's over its."""
    lines = [
        f"worker pace (the leader's last window, ended {clock(ended)}; "
        "the median worker's step rate over each one's):",
        f"  {'TASK':<10} {'HOST':<16} {'STEPS/S':>8} {'RELATIVE':>8}",
    ]
    for p in pace:
        mark = "  SLOW" if p.rank in slow else ""
        rate = f"{p.steps_per_s:.2f}" if p.steps_per_s is not None else "-"
        task = p.task or f"rank {p.rank}"
        lines.append(f"  {task:<10} {p.host:<16} {rate:>8} {p.relative:>7.2f}x{mark}")
    return lines


def period_lines(source: Mapping[str, Any]) -> list[str]:
    """summary.txt's slow periods, oldest first: when, how long, the cause."""
    periods = slow_periods(source)
    if not periods:
        return []
    lines = ["slow periods:"]
    for p in periods:
        if p.until is None:
            span = f"from {when(p.since)}, still slow when last recorded"
        else:
            span = f"{when(p.since)} to {when(p.until)} ({p.until - p.since:.0f} s)"
        lines.append(f"  {p.task or f'rank {p.rank}'} on {p.host} {span}: {p.cause}")
    return lines


def period_events(source: Mapping[str, Any]) -> list[dict[str, Any]]:
    """timeline.txt's slow periods: a ``slow-period`` event at each period's start (the
    first slow window; the leader's ``rank-slow`` event comes when it decided, later)."""
    out = []
    for p in slow_periods(source):
        until = when(p.until) if p.until is not None else "still slow when last recorded"
        out.append(
            {"t": p.since, "host": p.host, "event": "slow-period", "rank": p.rank,
             "until": until, "cause": p.cause}
        )  # fmt: skip
    return out
