"""The leader's score of every rank: busy time per window against the median rank.

Each host sends its ranks' counters (``meter.py``: ``busy_s``, ``cpu_s``, ``wall_s``,
which only grow) about once a second; :meth:`PaceBoard.tick` closes a window every
``window_s`` and scores each rank with enough readings in it: ``busy`` (its busiest
thread's on-CPU + run-queue time per wall second), ``relative`` (busy / the median
rank's busy). A rank at ``threshold`` x the median or more for ``windows`` windows in a
row is slow from the first of them (``since``); its first window under the threshold
ends the slow period. Pure: no I/O, the clock is passed in.

With ``basis="steps"`` (the kinds whose workers do not wait for each other: ps) the
counters are a worker's steps read from its log (``steps.py``) and ``relative`` is the
median worker's step rate over this worker's; the rest is the same.

A part of the supervisor's single source: standard library only, Python >= 3.7, names
prefixed ``pace_``/``Pace``/``PACE_``.
"""

from __future__ import annotations

from typing import Any

PACE_WINDOW_S = 15.0
PACE_THRESHOLD = 1.3
PACE_WINDOWS = 2
# A median rank busier than this at least: a job whose ranks all idle (a long
# evaluation on one rank, start-up) is not scored against a near-zero median.
PACE_MEDIAN_FLOOR = 0.05
PACE_KEPT_PERIODS = 50
PACE_MAX_RELATIVE = 99.0  # a worker with no step at all in a window: as slow as it gets


def pace_median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


class PaceBoard:
    """Windows, scores and slow periods for one job's ranks (the leader's)."""

    def __init__(
        self,
        window_s: float = PACE_WINDOW_S,
        threshold: float = PACE_THRESHOLD,
        windows: int = PACE_WINDOWS,
        start: float = 0.0,
        basis: str = "busy",
    ) -> None:
        self.basis = basis
        self.window_s = window_s
        self.threshold = threshold
        self.windows = max(1, int(windows))
        self.window_start = start
        self.latest: dict[int, dict[str, Any]] = {}  # rank -> its last counters
        self.opening: dict[int, dict[str, Any]] = {}  # rank -> counters at window start
        self.streak: dict[int, int] = {}
        self.first_high: dict[int, float] = {}  # rank -> start of its first high window
        self.slow: dict[int, dict[str, Any]] = {}
        self.periods: list[dict[str, Any]] = []
        self.pace: dict[int, dict[str, Any]] = {}

    def feed(self, host: str, figures: dict[str, Any]) -> None:
        """One rank's counters from ``host`` (``rank``, ``busy_s``, ``cpu_s``, ``wall_s``,
        ``cause``); a rank whose counters went back (restarted) starts again."""
        rank = int(figures["rank"])
        entry = {
            "host": host,
            "wall_s": float(figures["wall_s"]),
            "cause": str(figures.get("cause") or "unknown"),
        }
        if self.basis == "steps":
            entry.update(
                steps=int(figures["steps"]),
                step_wall_s=float(figures["step_wall_s"]),
                stride=int(figures.get("stride") or 0),
                task=str(figures.get("task") or f"worker {rank}")[:40],
            )
        else:
            entry.update(busy_s=float(figures["busy_s"]), cpu_s=float(figures.get("cpu_s") or 0))
        old = self.latest.get(rank)
        if old is not None and (
            entry["wall_s"] < old["wall_s"]
            or entry["host"] != old["host"]
            or entry.get("steps", 0) < old.get("steps", 0)
        ):
            self.opening.pop(rank, None)
        self.latest[rank] = entry
        self.opening.setdefault(rank, entry)

    def tick(self, now: float) -> list[dict[str, Any]]:
        """Close the window when it is due; the slow periods that began or ended."""
        if now - self.window_start < self.window_s:
            return []
        start, self.window_start = self.window_start, now
        if self.basis == "steps":
            return self.tick_steps(start, now)
        scored = {}
        for rank, last in self.latest.items():
            first = self.opening.get(rank)
            wall = last["wall_s"] - first["wall_s"] if first else 0.0
            if first is not None and wall >= self.window_s / 2:
                scored[rank] = (
                    (last["busy_s"] - first["busy_s"]) / wall,
                    (last["cpu_s"] - first["cpu_s"]) / wall,
                )
        self.opening = dict(self.latest)
        if len(scored) < 2:
            return []  # nothing to compare with
        median = max(pace_median([busy for busy, _cpu in scored.values()]), PACE_MEDIAN_FLOOR)
        changes = []
        for rank in sorted(scored):
            busy, cpu = scored[rank]
            last = self.latest[rank]
            relative = round(busy / median, 2)
            self.pace[rank] = {
                "rank": rank,
                "host": last["host"],
                "busy": round(min(busy, 1.0), 3),
                "wait": round(max(0.0, 1.0 - busy), 3),
                "cpu": round(min(cpu, 1.0), 3),
                "relative": relative,
                "window_end": now,
            }
            changes += self.judge(rank, relative, last, start, now)
        return changes

    def step_rate(self, first: dict[str, Any], last: dict[str, Any]) -> float | None:
        """A worker's steps per second over the window, or None where it cannot be told.

        Between its step lines (``step_wall_s``, its host's clock) where it moved; with no
        new line in the whole window, at most its last stride over the time since: a
        worker that prints every 100 steps is not slow between two lines, one that stopped
        is. (Not while lines come: the readings, a second apart, would make a bound
        from a short idle spell read slower than the worker is.)"""
        if last["wall_s"] - first["wall_s"] < self.window_s / 2:
            return None  # not read across the window
        moved = last["steps"] - first["steps"]
        span = last["step_wall_s"] - first["step_wall_s"]
        if moved > 0:
            return moved / span if span >= self.window_s / 2 else None
        idle = last["wall_s"] - last["step_wall_s"]
        return last["stride"] / idle if moved == 0 and last["stride"] > 0 and idle > 0 else None

    def tick_steps(self, start: float, now: float) -> list[dict[str, Any]]:
        rates = {}
        for rank, last in self.latest.items():
            first = self.opening.get(rank)
            rate = self.step_rate(first, last) if first is not None else None
            if rate is not None:
                rates[rank] = rate
        self.opening = dict(self.latest)
        median = pace_median(list(rates.values())) if len(rates) >= 2 else 0.0
        if median <= 0:
            return []  # nothing to compare with, or nobody moved
        changes = []
        for rank in sorted(rates):
            last = self.latest[rank]
            rate = rates[rank]
            relative = round(median / rate, 2) if rate > 0 else PACE_MAX_RELATIVE
            relative = min(relative, PACE_MAX_RELATIVE)
            self.pace[rank] = {
                "rank": rank,
                "host": last["host"],
                "task": last["task"],
                "steps_per_s": round(rate, 3),
                "relative": relative,
                "window_end": now,
            }
            changes += self.judge(rank, relative, last, start, now)
        return changes

    def judge(
        self, rank: int, relative: float, last: dict[str, Any], start: float, now: float
    ) -> list[dict[str, Any]]:
        if relative >= self.threshold:
            self.streak[rank] = self.streak.get(rank, 0) + 1
            self.first_high.setdefault(rank, start)
        else:
            self.streak[rank] = 0
            self.first_high.pop(rank, None)
        slow = self.slow.get(rank)
        if slow is not None and relative < self.threshold:
            del self.slow[rank]
            for period in self.periods:
                if period["rank"] == rank and period["until"] is None:
                    period["until"] = now
            return [dict(slow, event="recovered", relative=relative, until=now)]
        if slow is not None:
            slow.update(relative=relative, cause=last["cause"], host=last["host"])
            return []
        if self.streak[rank] < self.windows:
            return []
        since = self.first_high.get(rank, start)
        # A ps worker's entries say which task it is and that its step rate was judged.
        extra = {"task": last["task"], "basis": "steps"} if "task" in last else {}
        record = {
            "rank": rank,
            "host": last["host"],
            "relative": relative,
            "cause": last["cause"],
            "since": since,
            **extra,
        }
        self.slow[rank] = record
        self.periods.append(
            {
                "rank": rank,
                "host": last["host"],
                "since": since,
                "until": None,
                "cause": last["cause"],
                **extra,
            }
        )
        del self.periods[:-PACE_KEPT_PERIODS]
        return [dict(record, event="slow")]

    def record(self) -> dict[str, Any]:
        """The keys the leader's ``supervisor.json`` carries (the displays read these)."""
        for period in self.periods:
            slow = self.slow.get(period["rank"])
            if period["until"] is None and slow is not None:
                period["cause"] = slow["cause"]
        return {
            "slow_ranks": [dict(self.slow[r]) for r in sorted(self.slow)],
            "rank_pace": [dict(self.pace[r]) for r in sorted(self.pace)],
            "slow_periods": [dict(p) for p in self.periods],
        }
