"""A job's logs: every rank live with a host/rank prefix, rank choice, search, filter with
context, follow/pause, first error, wrap, save; a steps table per rank (hidden with ``s``);
``!`` opens a shell on the host of a rank (``ui/rank_shell_action.py``).

A worker follows the job's files on its hosts and puts batches in an inbox; the screen
takes everything waiting at once. The store keeps the last N lines per rank; the view
renders at most ``settings.log_view_lines`` of them (everything stays on the hosts').
Parts: widgets ``steps_table``, ``logs_summary``, ``log_view``; screen ``choose_ranks``;
``logs_ticks`` (lines held for the view under a firehose), ``logs_panels`` (steps, summary);
its base ``logs_search`` (search, filter, follow, first error: what the view is rebuilt to).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Header, Input

from console.jobs.models import JobPlan
from console.jobs.private import write_private
from console.logs.buffer import Gap, LogStore, Shown
from console.logs.models import LineRuns, LogBatch, LogLine, RankKey
from console.ui.inbox import Inbox
from console.ui.log_render import plain_lines, prefix_width, render_lines
from console.ui.rank_shell_action import SHELL_BINDING, RankShell, ShellRunner, run_suspended
from console.ui.screens.choose_ranks import ChooseRanks
from console.ui.screens.curves import CURVES_BINDING, CurvesScreen
from console.ui.screens.logs_panels import LogsPanels
from console.ui.screens.logs_search import LogsSearch
from console.ui.screens.logs_ticks import HeldLines
from console.ui.services import Services
from console.ui.widgets.keys_footer import KeysFooter
from console.ui.widgets.log_view import LazyLogView
from console.ui.widgets.logs_summary import LogsSummary
from console.ui.widgets.steps_table import StepsTable, steps_reading

__all__ = ["ChooseRanks", "LogsScreen", "steps_reading"]


# Batches (each one read, up to 256 KiB) waiting for the screen before the follower
# waits: bounds the memory and the work of one turn of the loop under a firehose.
INBOX_BATCHES = 8


class LogBatchesArrived(Message):
    """Log batches wait in the logs screen's inbox."""


class LogsScreen(LogsSearch):
    # The logs are a screen on top of the jobs screen: q, Esc and j go back to it (q would
    # otherwise quit the app, j would find the jobs mode already current and stay here).
    BINDINGS = [
        # Most used first: at 80 columns the footer shows the first eight or so.
        Binding("q", "back", "Back"),
        Binding("escape", "back", "Back", show=False),
        Binding("j", "jobs", "Jobs"),
        Binding("s", "steps_table", "Steps"),
        Binding("slash", "search", "Search", key_display="/"),
        Binding("n", "next_match", "Next match"),
        Binding("f", "follow", "Follow/pause"),
        Binding("w", "wrap", "Wrap"),
        Binding("e", "first_error", "First error"),
        Binding("r", "ranks", "Ranks"),
        Binding("m", "filter_mode", "Matching only"),
        CURVES_BINDING,
        Binding("ctrl+s", "save", "Save"),
        SHELL_BINDING,
    ]
    # Side by side the steps table takes 62 columns: under 140 it goes below the log.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (140, "-wide")]
    DEFAULT_CSS = """
    LogsScreen #steps-table { height: auto; }
    LogsScreen.-narrow #logs-body { layout: vertical; }
    LogsScreen.-narrow #log-view { height: 1fr; }
    LogsScreen.-narrow #steps-table { width: 1fr; max-height: 40%; }
    """

    def __init__(
        self,
        plan: JobPlan,
        services: Services,
        *,
        max_lines_per_rank: int | None = None,
        follow_hosts: bool = True,
    ) -> None:
        """``max_lines_per_rank`` overrides ``settings.log_lines_per_rank`` (benchmarks)."""
        super().__init__(name=f"logs:{plan.job_id}")
        self.plan = plan
        self.services = services
        settings = services.settings
        self.store = LogStore(max_lines_per_rank or settings.log_lines_per_rank)
        self.view_lines = settings.log_view_lines
        # While following, at most this many of the newest lines of one update go to the
        # view (a screen shows ~50; at 100k+ lines/s building and searching every line for
        # the view would cost more than ingesting it); the rest is a gap row, in the store.
        self.follow_append = settings.log_follow_append
        self.context_lines = settings.log_context_lines
        self.panels = LogsPanels(self)
        self.steps = self.panels.steps
        self.inbox: Inbox[LogBatch] = Inbox(self, LogBatchesArrived)
        self.ranks: list[RankKey] | None = None  # None: every rank
        self.search: re.Pattern[str] | None = None
        self.filter_mode = False
        self.following = True
        self.shown: list[LogLine | Shown | Gap] = []
        self.matches: list[int] = []  # positions in ``shown``
        self.match_at = -1
        self.notes: list[str] = []
        self._follow_hosts = follow_hosts
        self._width = 8
        self.focus_index: int | None = None
        self.error_index: int | None = None
        self.saved_to: Path | None = None
        self._mode: str | None = None  # the app mode (screen stack) it was opened in
        self._left_mode = False
        self.shell_runner: ShellRunner = run_suspended  # the shell key's (tests see argv)
        # Lines on their way to the view under a firehose (``logs_ticks.py``).
        self.held = HeldLines(
            self.follow_append,
            self.set_timer,
            lambda: self.following,
            self._append,
            self.rebuild,
            self._summary,
        )

    def compose(self) -> ComposeResult:
        yield Header()
        yield LogsSummary(id="logs-summary")
        yield Input(placeholder="search (regular expression, Enter applies, Esc clears)",
                    id="log-search")  # fmt: skip
        with Horizontal(id="logs-body"):
            yield LazyLogView(id="log-view", max_lines=self.view_lines)
            yield StepsTable(id="steps-table")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.view.focus()
        # The view renders with this screen's prefixes from the first line on; lines that
        # arrive before any rebuild (same prefix width) were shown as LogLine(...) reprs.
        self._show([])
        self.set_interval(self.services.settings.refresh_s, self._refresh_steps)
        if self._follow_hosts:
            self._follow()
        self._summary()
        self._mode = self.app.current_mode

    def on_screen_suspend(self) -> None:
        # Suspended by a switch to another mode (g, h), not by a dialog on top: the mode
        # is already the new one when this arrives.
        self._left_mode = self.app.current_mode != self._mode

    def on_screen_resume(self) -> None:
        # Back in this mode (j from the GPU screen): the jobs screen, not these old logs
        # (which would also have gone on following their hosts unseen).
        if self._left_mode:
            self.dismiss(None)

    # -- data in -------------------------------------------------------------------------

    @work(group="logs", exit_on_error=False)
    async def _follow(self) -> None:
        from console.logs.follower import HostLogFollower, follow_hosts
        from console.logs.targets import targets_from_plan

        connections = self.services.connections
        if connections is None:
            self.notes.append("not connected: no live logs")
            return
        followers = [HostLogFollower(connections[t.host], t) for t in targets_from_plan(self.plan)]
        async for batch in follow_hosts(followers):
            await self.inbox.put_bounded(batch, INBOX_BATCHES)

    def on_log_batches_arrived(self, _message: LogBatchesArrived) -> None:
        self.apply_batches(self.inbox.take())

    def apply_batches(self, batches: Sequence[LogBatch]) -> None:
        """Take batches of lines (and notes); the view appends what it shows."""
        # Runs, not lines: a LogLine is built only for what the view takes.
        lines = LineRuns.concat(batch.lines for batch in batches)
        for batch in batches:
            for note in batch.notes:
                if note.kind in ("error", "disconnected", "truncated", "rotated"):
                    self.notes = [*self.notes[-4:], f"{note.host}: {note.kind} {note.message}"]
                elif note.kind == "resumed":
                    # Following again (after a rank shell held the console, a network
                    # blip): the host's "disconnected" is over, the header drops it.
                    gone = f"{note.host}: disconnected"
                    self.notes = [n for n in self.notes if not n.startswith(gone)]
        if not lines:
            self._summary()
            return
        self.store.add(lines)
        self.steps.feed(lines)
        sources = {run.source: run for run in lines.runs}.values()
        new_width = max(self._width, prefix_width(run.source.line("", 0) for run in sources))
        if not self.following:
            pass  # the view stays still; "f" brings it up to date
        elif new_width != self._width:
            self._width = new_width
            self.rebuild()
        elif self.filter_mode:
            # Filtering the store on every batch of a firehose kept keys waiting.
            self.held.rebuild_at_tick(len(lines))
        else:
            chosen = None if self.ranks is None else set(self.ranks)
            self.held.hold(r for r in lines.runs if chosen is None or r.source.key in chosen)
        self.held.schedule()

    # -- view ----------------------------------------------------------------------------

    @property
    def view(self) -> LazyLogView:
        return self.query_one("#log-view", LazyLogView)

    def _render_item(self, item: LogLine | Shown | Gap) -> Text:
        return render_lines([item], width=self._width, search=self.search)[0]

    def _measure_item(self, item: LogLine | Shown | Gap) -> int:
        line = item.line if isinstance(item, Shown) else item
        return self._width + 3 + (len(line.text) if isinstance(line, LogLine) else 24)

    def _show(self, items: Sequence[LogLine | Shown | Gap]) -> None:
        # Wrapped rows continue under the text: the prefix, a space and "│ ".
        self.view.show(items, self._render_item, self._measure_item, indent=self._width + 3)

    def _append(self, lines: Sequence[LogLine], skipped: int = 0) -> None:
        """Append to the view; ``skipped`` lines before these (a firehose) show as a gap
        (they are in the store: pausing with ``f`` shows them)."""
        if not lines:
            return
        items: list[LogLine | Shown | Gap] = [Gap(skipped), *lines] if skipped else list(lines)
        start = len(self.shown) + (1 if skipped else 0)
        self.shown.extend(items)
        if self.search is not None:
            self.matches += [start + i for i, ln in enumerate(lines) if self.search.search(ln.text)]
        if len(self.shown) > self.view_lines:
            cut = len(self.shown) - self.view_lines
            self.shown = self.shown[cut:]
            self.matches = [m - cut for m in self.matches if m >= cut]
        self.view.add(items, scroll_end=True)

    def shown_text(self) -> list[str]:
        """What the view shows as plain lines, as ``distconsole logs`` prints them (lines
        held for the next tick included)."""
        self.held.flush()
        return plain_lines(self.shown)

    # -- panels (``logs_panels.py``) -------------------------------------------------------

    def _refresh_steps(self) -> None:
        self.panels.refresh_steps()

    def _summary(self) -> None:
        self.panels.summary()

    # -- actions -------------------------------------------------------------------------

    def action_back(self) -> None:
        box = self.query_one("#log-search", Input)
        if box.has_class("-open"):
            box.remove_class("-open")
            self.view.focus()
            return
        self.dismiss(None)

    def action_jobs(self) -> None:
        # A distinct action from q's: the footer shows one key per action.
        self.dismiss(None)

    def action_curves(self) -> None:
        """Loss and steps/s per rank over steps (``screens/curves.py``)."""
        record = self.panels.refresh_steps  # records the newest points first
        refresh = self.services.settings.refresh_s
        curves = self.panels.curves_from_start()
        self.app.push_screen(CurvesScreen(self.plan.job_id, curves, refresh, before=record))

    def action_steps_table(self) -> None:
        table = self.query_one("#steps-table", StepsTable)
        table.display = not table.display
        if table.display:
            self._refresh_steps()

    def action_ranks(self) -> None:
        def chosen(keys: list[RankKey] | None) -> None:
            if keys is None:
                return
            self.ranks = None if set(keys) == set(self.store.ranks()) else keys
            self.rebuild()
            self._summary()

        self.app.push_screen(ChooseRanks(self.store.ranks(), self.ranks), chosen)

    def action_rank_shell(self) -> None:
        # The rank the view is narrowed to (r) opens at once; otherwise the chooser asks.
        one = self.ranks[0] if self.ranks is not None and len(self.ranks) == 1 else None
        RankShell(self, self.services, self.shell_runner).choose(self.plan, one)

    def action_wrap(self) -> None:
        self.view.wrap = not self.view.wrap
        self.rebuild()

    def action_save(self) -> None:
        path = Path.cwd() / f"{self.plan.job_id}-logs.txt"
        try:
            # The job's logs: private to their user whatever the umask.
            write_private(path, "\n".join(self.shown_text()) + "\n")
        except OSError as exc:
            self.notify(f"could not save: {exc}", severity="error")
            return
        self.notify(f"saved {len(self.shown)} lines to {path}", timeout=5)
        self.saved_to = path
