"""What the report says of elastic membership (ddp ``--min-hosts``, ``--spare-hosts``):
the scale-down and replacement lines of ``summary.txt`` (and under a job on the jobs
screen), how a spare's process reads, and the cause added to a ``spare-joined`` event
of the timeline (the host it replaced, when that host left)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from console.jobs.membership import joined, replacements, spares_of

ENDED = ("succeeded", "failed", "stopped")  # a supervisor's final states
NOT_NEEDED = "spare, not needed"


def when(epoch: Any) -> str:
    if not isinstance(epoch, int | float):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def _records(
    view: Mapping[str, Any], truth: Mapping[str, Any], key: str
) -> list[Mapping[str, Any]]:
    found = truth.get(key) or view.get(key) or ()
    return [item for item in found if isinstance(item, Mapping)]


def scale_down_lines(view: Mapping[str, Any], truth: Mapping[str, Any]) -> list[str]:
    """``scaled down at ...: h3 left (cause); 3 of 4 hosts went on`` (--min-hosts)."""
    return [
        f"scaled down at {when(down.get('at'))}: {down.get('host')} left "
        f"({down.get('cause')}); {len(down.get('hosts_now') or ())} of "
        f"{down.get('hosts_total')} hosts went on"
        for down in _records(view, truth, "scale_downs")
    ]


def spare_notes(view: Mapping[str, Any], truth: Mapping[str, Any]) -> dict[str, str]:
    """Each planned spare -> what became of it: ``joined for node2 at ...``, ``spare, not
    needed`` (the job ended without it), ``spare, waiting`` (the job runs on)."""
    merged = {**view, **{k: v for k, v in truth.items() if v}}
    notes: dict[str, str] = {}
    pairs = replacements(_records(view, truth, "scale_downs"), _records(view, truth, "joins"))
    for join, down in pairs:
        lost = f" for {down.get('host')}" if down is not None else ""
        notes[str(join.get("host"))] = f"joined{lost} at {when(join.get('at'))}"
    ended = (truth.get("state") or view.get("supervisor")) in ENDED
    for spare in spares_of(merged):
        notes.setdefault(spare, NOT_NEEDED if ended else "spare, waiting to replace a lost host")
    return notes


def replacement_lines(view: Mapping[str, Any], truth: Mapping[str, Any]) -> list[str]:
    """``replacements: node3 joined for node2 at 2026-11-26 12:03:04`` (--spare-hosts),
    then one line per spare that never joined: ``node4: spare, not needed``."""
    notes = spare_notes(view, truth)
    came = joined({"joins": _records(view, truth, "joins")})
    lines = []
    if came:
        lines.append("replacements: " + "; ".join(f"{h} {notes[h]}" for h in came))
    lines += [f"{host}: {note}" for host, note in notes.items() if host not in came]
    return lines


def membership_lines(view: Mapping[str, Any], truth: Mapping[str, Any]) -> list[str]:
    return scale_down_lines(view, truth) + replacement_lines(view, truth)


def annotate_replacements(events: Sequence[dict[str, Any]]) -> None:
    """Adds ``replaced`` (the lost host) and ``cause`` (when it left, and why) to each of
    the leader's ``spare-joined`` events (those naming the spare as ``peer``), paired with
    the leader's ``scaled-down`` events as the report pairs its records."""
    downs = [
        {"host": e.get("peer"), "at": e.get("at", e.get("t")), "cause": e.get("cause")}
        for e in events
        if e.get("event") == "scaled-down" and e.get("peer")
    ]
    joins = [e for e in events if e.get("event") == "spare-joined" and e.get("peer")]
    pairs = replacements(downs, [{"at": e.get("at", e.get("t")), "event": e} for e in joins])
    for join, down in pairs:
        event = join["event"]
        if down is None:
            event["cause"] = "no lost host recorded before it joined"
            continue
        event["replaced"] = down["host"]
        event["cause"] = f"{down['host']} left at {when(down['at'])} ({down['cause']})"
