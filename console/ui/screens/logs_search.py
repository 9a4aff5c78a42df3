"""The logs screen's ways through its lines: search (``/``, ``n``), matching lines only
with context (``m``), follow/pause (``f``), the first error (``e``), and the rebuild of
the view from the store that each asks for (ranks, search, filter mode, or a window
around one line).

A base of :class:`~console.ui.screens.logs.LogsScreen`, which holds the state, takes
the lines and shows them as they come; this part chooses what the view shows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from textual.screen import Screen
from textual.widgets import Input

from console.logs.buffer import Gap, LogStore, Shown, compile_search
from console.logs.models import LogLine, RankKey, rank_key
from console.ui.screens.logs_ticks import HeldLines
from console.ui.widgets.log_view import LazyLogView


class LogsSearch(Screen[None]):
    store: LogStore
    view_lines: int
    context_lines: int
    held: HeldLines
    ranks: list[RankKey] | None  # None: every rank
    search: re.Pattern[str] | None
    filter_mode: bool
    following: bool
    shown: list[LogLine | Shown | Gap]
    matches: list[int]  # positions in ``shown``
    match_at: int
    focus_index: int | None
    error_index: int | None

    if TYPE_CHECKING:  # provided by LogsScreen

        @property
        def view(self) -> LazyLogView: ...
        def _show(self, items: Sequence[LogLine | Shown | Gap]) -> None: ...
        def _summary(self) -> None: ...

    def rebuild(self, focus_seq: int | None = None) -> None:
        """Show the view again from the store (ranks, search, filter mode, wrap): the
        newest ``view_lines`` items, or a window around line number ``focus_seq``. Only
        those are taken from the store and only the rows on screen are rendered."""
        items: list[LogLine | Shown | Gap]
        focus: int | None = None
        self.held.restart()
        if self.filter_mode and self.search is not None:
            limit = self.view_lines
            found = self.store.filtered(self.search, self.context_lines, self.ranks, limit)
            items = list(found[-limit:])
        elif focus_seq is not None:
            before = self.view_lines // 4
            after = self.view_lines - before
            window, focus, _ = self.store.window(focus_seq, before, after, self.ranks)
            items = list(window)
        else:
            items = list(self.store.tail(self.view_lines, self.ranks))
        self.shown = items
        self.focus_index = focus
        self.matches = []
        if self.search is not None:
            for i, item in enumerate(self.shown):
                line = item.line if isinstance(item, Shown) else item
                if isinstance(line, LogLine) and self.search.search(line.text):
                    self.matches.append(i)
        view = self.view
        self._show(self.shown)
        if focus is not None:
            self._scroll_view_to(focus)
        elif self.following:
            view.scroll_end(animate=False, immediate=True)

    def _scroll_view_to(self, index: int) -> None:
        view = self.view
        view.scroll_to(y=max(0, view.row_of(index) - 3), animate=False, immediate=True)

    # -- actions -------------------------------------------------------------------------

    def action_search(self) -> None:
        box = self.query_one("#log-search", Input)
        box.add_class("-open")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "log-search":
            return
        self.set_search(event.value)
        event.input.remove_class("-open")
        self.view.focus()

    def set_search(self, pattern: str) -> None:
        if not pattern.strip():
            self.search, self.filter_mode = None, False
            self.rebuild()
            self._summary()
            return
        try:
            self.search = compile_search(pattern)
        except ValueError as exc:
            self.notify(str(exc), severity="error")
            return
        self.rebuild()
        self.match_at = -1
        self.action_next_match()
        self._summary()

    def action_next_match(self) -> None:
        if not self.matches:
            if self.search is not None:
                self.notify("no line matches", severity="warning", timeout=2)
            return
        self.match_at = (self.match_at + 1) % len(self.matches)
        self.following = False  # stay on the match while new lines arrive
        self._scroll_view_to(self.matches[self.match_at])
        self._summary()

    def action_filter_mode(self) -> None:
        if self.search is None:
            self.notify("search first (/), then m shows only matching lines", timeout=3)
            return
        self.filter_mode = not self.filter_mode
        self.rebuild()
        self._summary()

    def action_follow(self) -> None:
        self.following = not self.following
        if self.following:
            self.rebuild()
        self._summary()

    def action_first_error(self) -> None:
        error = self.store.first_error
        if error is None:
            self.notify("no error line so far", timeout=2)
            return
        self.filter_mode = False
        if self.ranks is not None and rank_key(error) not in self.ranks:
            self.ranks = None
        self.following = False
        self.rebuild(focus_seq=self.store.first_error_seq)
        self.error_index = self.focus_index
        self._summary()
