"""The logs screen's summary line: job, lines, follow state, steps, stalls, choices."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from textual.widgets import Static

from console.logs.models import RankKey, rank_label
from console.logs.steps import JobProgress
from console.ui.widgets.steps_table import steps_reading


def summary_parts(
    *,
    job_id: str,
    received: int,
    following: bool,
    progress: JobProgress | None,
    split_total: bool,
    stalled: Collection[RankKey],
    ranks: Sequence[RankKey] | None,
    search: re.Pattern[str] | None,
    matches: int,
    filter_context: int | None,
    note: str | None,
    ended: str | None = None,
    restarts: int = 0,
    membership: str = "",
    slow: str = "",
) -> list[str]:
    """What the summary says, in order; ``filter_context`` is None outside filter mode;
    ``ended``: the state of a job that has ended (nothing more to follow, no stalls);
    ``slow``: the slow ranks' mark (the leader's score, issue 32)."""
    parts = [
        f"job {job_id}",
        f"{received} lines",
        f"ended: {ended}" if ended else "following" if following else "PAUSED (f follows)",
    ]
    if restarts:
        parts.append(f"restart {restarts}")
    if membership:
        parts.append(membership)  # "2 of 3 hosts": a scale-down (--min-hosts)
    if progress is not None and any(r.step is not None for r in progress.ranks):
        parts.append(steps_reading(progress, split_total=split_total))
        if progress.samples_per_s is not None:
            parts.append(f"{progress.samples_per_s:.1f} samples/s")
        if progress.slowest is not None and progress.slowest_lag:
            parts.append(f"slowest {rank_label(progress.slowest)} -{progress.slowest_lag}")
    if stalled and not ended:
        parts.append("STALLED: " + ", ".join(rank_label(k) for k in stalled))
    if slow and not ended:
        parts.append(slow)
    if ranks is not None:
        parts.append("ranks " + ",".join(rank_label(k) for k in ranks))
    if search is not None:
        parts.append(f"/{search.pattern}/ {matches} matches")
    if filter_context is not None:
        parts.append(f"matching only (±{filter_context})")
    if note:
        parts.append(note)
    return parts


class LogsSummary(Static):
    DEFAULT_CSS = """
    LogsSummary {
        height: auto;
        padding: 0 1;
        background: $panel;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id, markup=False)
        self._said: str | None = None

    def say(self, parts: Sequence[str]) -> None:
        text = "  ·  ".join(parts)
        if text == self._said:
            return
        # Updated with every batch: a layout (the whole screen, steps table included) only
        # when the line may wrap differently, else a repaint of this line alone.
        width = max(1, self.content_size.width)
        old = self._said
        same_rows = old is not None and len(old) // width == len(text) // width
        self.update(text, layout=not same_rows)
        self._said = text
