"""The slow-rank keys a job's leader supervisor records (issue 32), read for display.

``host_view`` (``discover.py``) carries the leader's ``slow_ranks`` (ranks slow now),
``rank_pace`` (every rank's latest window) and ``slow_periods`` (each slow spell, ``until``
None while it lasts). They come from files on the hosts: each entry is checked here and
one that is not what it should be is left out, never shown half. The screens, ``jobs``,
the report and ``/metrics`` read them through these functions and words.
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
    relative: float  # the rank's busy time / the median rank's
    cause: str
    since: float  # epoch seconds


@dataclass(frozen=True, slots=True)
class RankPace:
    rank: int
    host: str
    busy: float  # fraction of the last window
    wait: float
    relative: float
    window_end: float


@dataclass(frozen=True, slots=True)
class SlowPeriod:
    rank: int
    host: str
    since: float
    until: float | None  # None: still slow
    cause: str


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
        out.append(SlowRank(rank, host, rel, _str(e.get("cause")) or "unknown", since))
    return sorted(out, key=lambda s: s.rank)


def rank_pace(view: Mapping[str, Any] | None) -> list[RankPace]:
    """Every rank's latest window, by rank."""
    out = []
    for e in _entries(view, "rank_pace"):
        rank, host = _int(e.get("rank")), _str(e.get("host"))
        busy, wait, rel = _float(e.get("busy")), _float(e.get("wait")), _float(e.get("relative"))
        end = _float(e.get("window_end"))
        if None in (rank, host, busy, wait, rel, end):
            continue
        out.append(RankPace(rank, host, busy, wait, rel, end))  # type: ignore[arg-type]
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
        out.append(SlowPeriod(rank, host, since, until, _str(e.get("cause")) or "unknown"))
    return sorted(out, key=lambda p: (p.since, p.rank))


def clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def slow_mark(slow: list[SlowRank]) -> str:
    """ "slow: rank 2" / "slow: ranks 2, 5": the short mark beside a job's state."""
    if not slow:
        return ""
    ranks = ", ".join(str(s.rank) for s in slow[:4]) + (", ..." if len(slow) > 4 else "")
    return f"slow: rank{'s' if len(slow) > 1 else ''} {ranks}"


def slow_words(s: SlowRank) -> str:
    """ "rank 2 on node1 busy 1.8x the median since 07:31:02: CPU: cgroup quota ...\""""
    pace = f"busy {s.relative:.1f}x the median since {clock(s.since)}"
    return f"rank {s.rank} on {s.host} {pace}: {s.cause}"


def slow_header(slow: list[SlowRank]) -> str:
    """The logs header's mark: "SLOW rank 2 on node1 1.8x (CPU: cgroup quota ...)"."""
    return "; ".join(f"SLOW rank {s.rank} on {s.host} {s.relative:.1f}x ({s.cause})" for s in slow)


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
    lines = [
        f"rank pace (the leader's last window, ended {clock(ended)}; busy vs the median rank):",
        f"  {'RANK':>4}  {'HOST':<16} {'BUSY':>5} {'WAIT':>5} {'RELATIVE':>8}",
    ]
    for p in pace:
        mark = "  SLOW" if p.rank in slow else ""
        lines.append(
            f"  {p.rank:>4}  {p.host:<16} {p.busy:>5.0%} {p.wait:>5.0%} {p.relative:>7.2f}x{mark}"
        )
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
        lines.append(f"  rank {p.rank} on {p.host} {span}: {p.cause}")
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
