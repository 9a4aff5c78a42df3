"""The supervisor's pace part: measure this host's ranks, score them on the leader.

Every ``every_s`` (1 s) each supervisor reads its ranks' counters (``meter.py``) and,
about twice a window, each rank's cause (``causes.py``'s ``rank_cause``, in a thread:
it samples counters a second apart; "unknown" where it finds none). A follower sends
them to the leader (``{"type": "pace"}`` over the signed peer link); the leader feeds
its :class:`PaceBoard` (``score.py``), records ``slow_ranks``, ``rank_pace`` and
``slow_periods`` in its ``supervisor.json``, logs ``rank-slow``/``rank-recovered``
events and notifies ``slow`` once per slow period.

The config's ``pace`` (``{"window_s", "threshold", "windows", "every_s"}``, or false to
turn it off) tunes it. The kinds whose ranks step together (ddp, mpi, horovod) are scored
on busy time; a ps job's workers, which do not wait for each other, on their step rates
read from their logs (``steps.py``, the board's ``basis="steps"``).

A part of the supervisor's single source: standard library only, Python >= 3.7, names
prefixed ``pace_``/``Pace``/``SvPace``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any

if __name__ != "__main__":  # imported by the console/tests; on a host the parts precede
    from console.hostprogs.pace.causes import rank_cause
    from console.hostprogs.pace.meter import PaceMeter
    from console.hostprogs.pace.score import (
        PACE_THRESHOLD,
        PACE_WINDOW_S,
        PACE_WINDOWS,
        PaceBoard,
    )
    from console.hostprogs.pace.steps import PaceStepMeter

PACE_KINDS = ("ddp", "mpi", "horovod")
# Workers that do not wait for each other: a slow one holds nobody back, so its busy time
# says nothing; its step rate does. (A Ray job's steps are its driver's alone.)
PACE_RATE_KINDS = ("ps",)
PACE_EVERY_S = 1.0
PACE_MAX_RANKS = 4096  # per message from a follower


def pace_cause(pid: int, gpu: int | None) -> str:
    """The cause ``causes.py`` finds for the rank, "unknown" where it finds none."""
    try:
        text = str(rank_cause(pid, gpu))
    except Exception:  # a reader that fails says "unknown", never stops the supervisor
        return "unknown"
    return text[:300] or "unknown"


def pace_span(seconds: float) -> str:
    """ "40 s" under 2 minutes (--exclude-slow takes fractions), else "5 min"."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def pace_exclusions(
    slow: list[dict[str, Any]], now: float, after_s: float, leader: str, done: set
) -> dict[str, str]:
    """``--exclude-slow``: host -> why, for each host (not the leader's: its agent holds
    the rendezvous) with a rank slow for ``after_s`` or more, not drained before."""
    found: dict[str, str] = {}
    for rank in slow:
        host = str(rank.get("host"))
        since = rank.get("since")
        if host == leader or host in done or host in found or not isinstance(since, float):
            continue
        if now - since >= after_s:
            found[host] = (
                f"rank {rank.get('rank')} slow for {pace_span(now - since)} "
                f"({rank.get('relative')}x the median: {rank.get('cause')})"
            )
    return found


def pace_settings(cfg: dict[str, Any]) -> dict[str, float] | None:
    """The job's pace knobs, or None where the job is not scored."""
    pace = cfg.get("pace", {})
    if pace is False or pace is None or str(cfg.get("kind")) not in PACE_KINDS + PACE_RATE_KINDS:
        return None
    pace = pace if isinstance(pace, dict) else {}
    return {
        "window_s": float(pace.get("window_s") or PACE_WINDOW_S),
        "threshold": float(pace.get("threshold") or PACE_THRESHOLD),
        "windows": float(pace.get("windows") or PACE_WINDOWS),
        "every_s": float(pace.get("every_s") or PACE_EVERY_S),
    }


class SvPace:
    """The pace side of :class:`Supervisor` (a mixin: the state lives there)."""

    cfg: dict[str, Any]
    job_dir: str
    job_id: str
    host: str
    is_leader: bool
    dirty: bool
    notifier: Any

    peers: list[Any]

    if TYPE_CHECKING:  # provided by the supervisor and its other parts (never shadowed)

        def event(self, event: str, **details: Any) -> None: ...
        def send_leader(self, message: dict[str, Any]) -> None: ...
        def pack(self, message: dict[str, Any]) -> bytes: ...
        def drain(self, why: str) -> None: ...

    def init_pace(self) -> None:
        self.pace_settings = pace_settings(self.cfg)
        # --exclude-slow (elastic ddp): drain a follower whose rank is slow this long.
        self.pace_exclude_s = float(self.cfg.get("exclude_slow_s") or 0)
        self.pace_excluded: set = set()
        self.pace_meter: PaceMeter | PaceStepMeter = PaceMeter(self.job_id)
        basis = "busy"
        if str(self.cfg.get("kind")) in PACE_RATE_KINDS:
            basis = "steps"
            mine = [p for p in self.cfg.get("processes") or () if p.get("host") == self.host]
            self.pace_meter = PaceStepMeter(self.job_dir, mine)
        self.pace_last = 0.0
        self.pace_causes: dict[int, tuple[float, str]] = {}  # rank -> (when asked, text)
        self.pace_asking: threading.Thread | None = None
        self.pace_board: PaceBoard | None = None
        if self.pace_settings is not None and self.is_leader:
            self.pace_board = PaceBoard(
                self.pace_settings["window_s"],
                self.pace_settings["threshold"],
                int(self.pace_settings["windows"]),
                start=time.time(),
                basis=basis,
            )

    def pace_tick(self) -> None:
        settings = self.pace_settings
        now = time.time()
        if settings is None or now - self.pace_last < settings["every_s"]:
            return
        self.pace_last = now
        figures = self.pace_meter.sample()
        for item in figures:
            item["cause"] = self.pace_rank_cause(item, now, settings["window_s"])
            del item["pid"], item["local"]
        if self.is_leader:
            for item in figures:
                self.pace_feed(self.host, item)
            self.pace_judge(now)
        elif figures:
            self.send_leader({"type": "pace", "ranks": figures})

    def pace_rank_cause(self, item: dict[str, Any], now: float, window_s: float) -> str:
        """The rank's cause as last read. Read again about twice a window, in a thread
        of its own: the readers sample counters a second apart and may run nvidia-smi,
        and the loop must keep its heartbeats."""
        rank = int(item["rank"])
        known = self.pace_causes.get(rank)
        busy = self.pace_asking is not None and self.pace_asking.is_alive()
        if not busy and (known is None or now - known[0] >= window_s / 2):
            text = known[1] if known is not None else "unknown"
            self.pace_causes[rank] = (now, text)
            args = (rank, int(item["pid"]), item.get("local"))
            self.pace_asking = threading.Thread(target=self.pace_ask, args=args, daemon=True)
            self.pace_asking.start()
        return known[1] if known is not None else "unknown"

    def pace_ask(self, rank: int, pid: int, local: int | None) -> None:
        text = pace_cause(pid, local)
        self.pace_causes[rank] = (self.pace_causes.get(rank, (time.time(), ""))[0], text)

    def from_follower_pace(self, host: str, message: dict[str, Any]) -> None:
        ranks = message.get("ranks")
        if self.pace_board is None or not isinstance(ranks, list):
            return
        for item in ranks[:PACE_MAX_RANKS]:
            if isinstance(item, dict):
                self.pace_feed(host, item)

    def pace_feed(self, host: str, item: dict[str, Any]) -> None:
        if self.pace_board is None:
            return
        with contextlib.suppress(KeyError, TypeError, ValueError):  # a malformed report
            self.pace_board.feed(host, item)

    def pace_judge(self, now: float) -> None:
        assert self.pace_board is not None
        for change in self.pace_board.tick(now):
            self.dirty = True
            where = f"{change.get('task') or 'rank ' + str(change['rank'])} on {change['host']}"
            if change["event"] == "slow":
                self.event("rank-slow", **{k: v for k, v in change.items() if k != "event"})
                reason = f"{where} {change['relative']:.1f}x the median: {change['cause']}"
                self.notifier.notify("slow", "running", reason, str(change["host"]))
            else:
                self.event("rank-recovered", **{k: v for k, v in change.items() if k != "event"})
        if self.pace_exclude_s > 0:
            slow = self.pace_board.record()["slow_ranks"]
            found = pace_exclusions(slow, now, self.pace_exclude_s, self.host, self.pace_excluded)
            for host, why in found.items():
                self.pace_excluded.add(host)
                self.event("exclude-slow", peer=host, why=why)
                for peer in self.peers:
                    if peer.host == host:
                        peer.send(self.pack({"type": "drain", "why": why}))

    def from_leader_drain(self, message: dict[str, Any]) -> None:
        """A follower told by the leader to leave the job (``--exclude-slow``): drained as
        a failing GPU's host is (drain.py), if this host may be drained at all."""
        if getattr(self, "drain_on", False) and getattr(self, "drained", None) is None:
            self.drain(str(message.get("why") or "slow"))

    def pace_record(self) -> dict[str, Any]:
        if self.pace_board is None:
            return {}
        return self.pace_board.record()
