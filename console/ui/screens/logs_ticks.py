"""The logs screen's lines on their way to the view under a firehose: held until a tick.

Under a firehose (``TICK_BURST`` lines or more waiting) new lines reach the view (and the
summary its count) at most every ``VIEW_TICK_S``: every batch was a scroll and a repaint
of the whole view, most of what a frame cost, and keys waited behind them; nobody reads
100k lines/s, 10 updates/s look live. Fewer lines show as they come. Only the newest
``follow_append`` lines are held (they are all in the store); the rest become a gap row.
In filter mode (``m``) the view is rebuilt from the store at a tick, not per batch.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from textual.timer import Timer

from console.logs.models import LineRun, LineRuns, LogLine

VIEW_TICK_S = 0.1
TICK_BURST = 1000


class HeldLines:
    """Runs held for the view until the next tick, and the tick's timer."""

    def __init__(
        self,
        follow_append: int,
        set_timer: Callable[[float, Callable[[], None]], Timer],
        following: Callable[[], bool],
        show: Callable[[Sequence[LogLine], int], None],
        rebuild: Callable[[], None],
        after: Callable[[], None],
    ) -> None:
        """At a tick, ``show(lines, skipped)`` (while following) or ``rebuild()`` (when
        one is due), then ``after()`` (the summary)."""
        self.follow_append = follow_append
        self._set_timer = set_timer
        self._following = following
        self._show = show
        self._rebuild = rebuild
        self._after = after
        self._pending: deque[LineRun] = deque()
        self._pending_lines = 0
        self._skipped = 0
        self._rebuild_due = False
        self._tick: Timer | None = None
        self._last_tick = float("-inf")

    def hold(self, runs: Iterable[LineRun]) -> None:
        """Keep runs for the next tick: only the newest ``follow_append`` lines (and the
        run that reaches past them) are kept; the others are counted for the gap row."""
        pending = self._pending
        for run in runs:
            pending.append(run)
            self._pending_lines += run.nlines
            while self._pending_lines - pending[0].nlines >= self.follow_append:
                self._skipped += pending[0].nlines
                self._pending_lines -= pending.popleft().nlines

    def rebuild_at_tick(self, lines: int) -> None:
        """``lines`` arrived in filter mode: the view is rebuilt at the next tick."""
        self._rebuild_due = True
        self._skipped += lines

    def schedule(self) -> None:
        """Tick now when few lines wait or a tick is overdue; else at the next tick."""
        if self._tick is not None:
            return
        wait = VIEW_TICK_S - (time.monotonic() - self._last_tick)
        if wait <= 0 or self._pending_lines + self._skipped < TICK_BURST:
            self.tick()
        else:
            self._tick = self._set_timer(wait, self.tick)

    def tick(self) -> None:
        """Show what was held since the last tick (or rebuild), then ``after()``."""
        self._tick = None
        following = self._following()
        if self._rebuild_due and following:
            self._rebuild()
        elif self._pending and following:
            fresh = LineRuns(self._pending)
            extra = max(0, len(fresh) - self.follow_append)
            self._show(fresh[extra:], self._skipped + extra)
        self.drop()
        self._last_tick = time.monotonic()  # after the rebuild's restart()
        self._after()

    def flush(self) -> None:
        """Show what is held now (before reading what the view shows)."""
        if self._pending or self._rebuild_due:
            if self._tick is not None:
                self._tick.stop()
            self.tick()

    def drop(self) -> None:
        """Forget what is held (a rebuild took the view from the store): the next batch
        shows at once."""
        self._pending.clear()
        self._pending_lines = self._skipped = 0
        self._rebuild_due = False

    def restart(self) -> None:
        """After a rebuild: what is held is in the store, the next batch shows at once."""
        self.drop()
        self._last_tick = float("-inf")
