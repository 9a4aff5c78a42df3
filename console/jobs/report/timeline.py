"""The report's ``timeline.txt``: every host's ``events.jsonl`` merged by time, the
leader's ``spare-joined`` events with the host each spare replaced
(``report/membership.annotate_replacements``), and each slow period of a rank from the
leader's record (``slow-period`` at its start, ``report/slow_ranks.period_events``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from console.jobs.report.membership import annotate_replacements, when
from console.jobs.report.slow_ranks import period_events


class HostFiles(Protocol):
    """What the timeline reads of a host's bundle (``bundle.HostBundle``)."""

    host: str
    files: dict[str, bytes]

    def text(self, name: str) -> str: ...


def timeline(
    bundles: Sequence[HostFiles], pace: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """``pace``: the leader's record holding ``slow_periods`` (its supervisor.json)."""
    events = period_events(pace or {})
    seen = set()
    for bundle in bundles:
        # events.jsonl (the leader's or a host's own) and events.HOST.jsonl (a follower's);
        # hosts that share a home bundle the same files: each line once.
        names = [n for n in bundle.files if n.startswith("events.") and n.endswith(".jsonl")]
        for name in sorted(names):
            for line in bundle.text(name).splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict) and line not in seen:
                    seen.add(line)
                    event.setdefault("host", bundle.host)
                    events.append(event)
    events.sort(key=_event_time)
    annotate_replacements(events)  # a spare-joined event names the host it replaced
    return events


def _event_time(event: Mapping[str, Any]) -> float:
    t = event.get("t")
    return float(t) if isinstance(t, int | float) else 0.0


def timeline_text(events: Sequence[Mapping[str, Any]]) -> str:
    lines = []
    for event in events:
        rest = {k: v for k, v in event.items() if k not in ("t", "host", "event")}
        detail = " ".join(f"{k}={json.dumps(v)}" for k, v in rest.items())
        lines.append(f"{when(event.get('t'))} {event.get('host')} {event.get('event')} {detail}")
    return "\n".join(lines) + ("\n" if lines else "")
