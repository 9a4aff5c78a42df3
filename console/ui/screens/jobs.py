"""``j``: every job of this inventory with state, duration, hosts and ranks; ``s`` stops
the selected job after a confirmation; Enter opens its logs; ``!`` a shell on one of its
ranks' hosts.

The rows come from the app's store; the app hands the screen the rows that changed
(job events, history re-reads) and each is written in place by its key: a changed
job rewrites only its changed cells, a new one is added and the table re-ordered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, DataTable, Header, Static

from console.display import duration
from console.errors import ConsoleError
from console.jobs.models import JobState
from console.ui.formatting import plain
from console.ui.jobs_service import JobRow
from console.ui.messages import OpenLogs
from console.ui.overview import count
from console.ui.rank_shell_action import SHELL_BINDING, RankShell, ShellRunner, run_suspended
from console.ui.screens.forward import (
    FORWARD_BINDING,
    hidden_forwards_line,
    job_suggestion,
    open_forwards,
    update_forwards_line,
)
from console.ui.services import Services
from console.ui.theming import state_colour
from console.ui.widgets.keys_footer import KeysFooter
from console.ui.widgets.row_table import RowTable

STATE_COLOURS = {
    JobState.STARTING: "connecting",
    JobState.RUNNING: "up",
    JobState.SUCCEEDED: "up",
    JobState.FAILED: "down",
    JobState.STOPPED: "auth-failed",
    JobState.LOST: "host-key-rejected",
    JobState.UNSUPERVISED: "connecting",
}
# The state right after the ID: at 80 columns a job's ID (38 characters for example:ddp's)
# and its name pushed the state past the screen's edge, cut ("succeede").
COLUMNS = ("ID", "State", "Name", "Kind", "Duration", "Hosts", "Ranks")
KEYS = tuple(label.lower() for label in COLUMNS)
DETAIL_LINES = 11  # the detail box is 12 rows high, the state line included


def failure_excerpt(failure: str, lines: int = DETAIL_LINES) -> str:
    """The first line (who failed, how) and the LAST lines of the output: the detail box
    is short, and a traceback's last line is the one that says what went wrong."""
    first, *rest = failure.splitlines() or [""]
    if len(rest) < lines:
        return failure
    return "\n".join([first, "…", *rest[-(lines - 2) :]])


class ConfirmStop(ModalScreen[bool]):
    BINDINGS = [
        Binding("y", "answer(True)", "Stop it"),
        Binding("n,escape", "answer(False)", "Keep it"),
    ]

    def __init__(self, row: JobRow) -> None:
        super().__init__()
        self.row = row

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(
                f"Stop job {self.row.id} ({self.row.name}) on {', '.join(self.row.hosts)}?\n"
                "Every process group gets SIGTERM, then SIGKILL after the grace period.",
                id="confirm-text",
                markup=False,
            )
            yield Button("Stop it (y)", variant="error", id="confirm-yes")
            yield Button("Keep it (n)", id="confirm-no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm-yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class JobsScreen(Screen[None]):
    BINDINGS = [
        Binding("s", "stop", "Stop job"),
        Binding("r", "report", "Report"),
        SHELL_BINDING,
        FORWARD_BINDING,
        # Priority: otherwise the table's own Enter ("Select") is what the footer and
        # the help show, and nobody learns that Enter opens the logs.
        Binding("enter", "logs", "Logs", priority=True),
    ]

    def __init__(self, services: Services) -> None:
        super().__init__(name="jobs")
        self.services = services
        self._cells: dict[str, tuple[str | Text, ...]] = {}  # what each row shows
        self._select_next: str | None = None
        self.shell_runner: ShellRunner = run_suspended  # the shell key's (tests see argv)

    @property
    def rows(self) -> Mapping[str, JobRow]:
        return self.services.store.jobs

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="jobs-summary", markup=False)
        table = RowTable(id="jobs-table", cursor_type="row")
        yield table
        yield Static("", id="job-detail", markup=False)
        yield hidden_forwards_line()
        yield KeysFooter()

    def on_mount(self) -> None:
        table = self.query_one("#jobs-table", DataTable)
        for label, key in zip(COLUMNS, KEYS, strict=True):
            table.add_column(label, key=key)
        self.apply_rows(list(self.rows.values()))
        self.set_interval(self.services.settings.refresh_s, self._tick)
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self._recolour())

    def on_screen_resume(self) -> None:
        self._tick()  # durations moved while another screen was shown
        if self.services.jobs is not None:
            self.services.jobs.jobs_in_view(True)

    def on_screen_suspend(self) -> None:
        if self.services.jobs is not None:
            self.services.jobs.jobs_in_view(False)

    def _tick(self) -> None:
        # Only running jobs' durations move; every other cell waits for an event.
        self.apply_rows([r for r in self.rows.values() if r.ended is None])
        update_forwards_line(self, self.services)

    def _cells_of(self, row: JobRow, now: float) -> tuple[str | Text, ...]:
        colour = state_colour(self.app.current_theme, STATE_COLOURS[row.state])
        return (
            plain(row.id),
            Text(row.state_text, style=f"bold {colour}"),
            plain(row.name),
            plain(row.kind),
            plain(duration(row.duration(now))),
            plain(", ".join(row.hosts))
            + (f" · rendezvous {plain(row.rendezvous_host)}" if row.rendezvous_host else ""),
            plain(row.ranks),
        )

    def apply_rows(self, rows: Sequence[JobRow]) -> None:
        """Rows that are new or changed (already in the store): each is written by its
        key, only the cells that differ; the cursor stays on its job."""
        if not self.query("#jobs-table"):
            return  # on_mount shows the store
        table = self.query_one("#jobs-table", DataTable)
        selected = self.selected_id
        now = self.services.clock()
        added = False
        for row in rows:
            cells = self._cells_of(row, now)
            before = self._cells.get(row.id)
            if before is None:
                table.add_row(*cells, key=row.id)
                added = True
            else:
                for key, cell, old in zip(KEYS, cells, before, strict=True):
                    if cell != old:
                        table.update_cell(row.id, key, cell, update_width=True)
            self._cells[row.id] = cells
        if added:
            started = {job_id: row.started for job_id, row in self.rows.items()}
            table.sort("id", key=lambda cell: -started.get(str(cell), 0.0))
        if self._select_next in self._cells:
            selected, self._select_next = self._select_next, None
        if selected in self._cells:
            table.move_cursor(row=table.get_row_index(selected))
        running = sum(1 for r in self.rows.values() if not r.state.finished)
        self.query_one("#jobs-summary", Static).update(
            f"{count(len(self.rows), 'job')}  ·  {running} not finished  ·  "
            "l: launch  s: stop  r: report  Enter: logs"
        )
        self._show_detail()

    def _recolour(self) -> None:
        table = self.query_one("#jobs-table", DataTable)
        now = self.services.clock()
        for row in self.rows.values():
            cells = self._cells_of(row, now)
            # The width too: a state that changed meanwhile ("starting" to "succeeded")
            # would otherwise keep the old width, cut ("succeede").
            table.update_cell(row.id, "state", cells[KEYS.index("state")], update_width=True)
            self._cells[row.id] = cells

    def select_job(self, job_id: str) -> None:
        """Put the cursor on this job as soon as it is listed (a job just launched)."""
        self._select_next = job_id
        if self.is_mounted:
            self.apply_rows([])

    @property
    def selected_id(self) -> str | None:
        if not self.query("#jobs-table"):
            return None
        table = self.query_one("#jobs-table", DataTable)
        if not table.row_count:
            return None
        key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return key.value

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    def _show_detail(self) -> None:
        row = self.rows.get(self.selected_id or "")
        text = ""
        if row is not None:
            text = f"{row.id}: {row.state.value}"
            if row.notes:
                text += "\n" + "\n".join(row.notes)
            if row.failure:
                text += "\n" + failure_excerpt(row.failure)
        self.query_one("#job-detail", Static).update(text)

    def action_stop(self) -> None:
        row = self.rows.get(self.selected_id or "")
        if row is None:
            return
        if row.state.finished:
            self.notify(f"{row.id} has already {row.state.value}", severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._stop(row.id)

        self.app.push_screen(ConfirmStop(row), answered)

    @work(group="stop")
    async def _stop(self, job_id: str) -> None:
        jobs = self.services.jobs
        if jobs is None:
            self.notify("Not connected to the cluster", severity="error")
            return
        self.notify(f"Stopping {job_id} on every host…", timeout=3)
        try:
            report = await jobs.stop(job_id)
        except ConsoleError as exc:
            self.notify(f"Stopping {job_id} failed: {exc}", severity="error", timeout=15)
            return
        # The row follows the job's own events; only the report is said here.
        if report.clean:
            self.notify(f"{job_id}: {report.describe()}", timeout=10)
        else:
            self.notify(f"{job_id}: {report.describe()}", severity="error", timeout=20)

    def action_report(self) -> None:
        job_id = self.selected_id
        if job_id is not None:
            self._report(job_id)

    @work(group="report")
    async def _report(self, job_id: str) -> None:
        jobs = self.services.jobs
        if jobs is None:
            self.notify("Not connected to the cluster", severity="error")
            return
        out = Path.cwd() / f"distconsole-report-{job_id}"
        self.notify(f"Writing the report of {job_id} to {out}…", timeout=3)
        try:
            summary = await jobs.report(job_id, out)
        except ConsoleError as exc:
            self.notify(f"Report of {job_id} failed: {exc}", severity="error", timeout=15)
            return
        head = "\n".join(summary.read_text().splitlines()[:6])
        self.notify(f"Report written to {out}/\n{head}", timeout=20)

    def action_rank_shell(self) -> None:
        job_id = self.selected_id
        if job_id is None:
            self.notify(
                "No job selected: launch one (l), then ! opens a shell on a rank",
                severity="warning",
            )
            return
        self._rank_shell(job_id)

    @work(group="rank-shell", exclusive=True)
    async def _rank_shell(self, job_id: str) -> None:
        jobs = self.services.jobs
        if jobs is None:
            self.notify(
                "Not connected to the cluster yet: wait for the hosts (h), then !",
                severity="error",
            )
            return
        try:
            plan = await jobs.plan_of(job_id)
        except ConsoleError as exc:
            self.notify(f"No shell: {exc}", severity="error", timeout=15)
            return
        RankShell(self, self.services, self.shell_runner).choose(plan)

    @work(group="forward", exclusive=True)
    async def action_forward(self) -> None:
        """A port of the selected job's hosts here: a Ray job's dashboard offered."""
        suggestion = ""
        job_id, jobs = self.selected_id, self.services.jobs
        if job_id is not None and jobs is not None:
            try:
                suggestion = job_suggestion(await jobs.plan_of(job_id))
            except ConsoleError:
                row = self.rows.get(job_id)
                suggestion = f"{row.hosts[0]}:" if row is not None and row.hosts else ""
        open_forwards(self, self.services, suggestion)

    def on_data_table_row_selected(self, _event: DataTable.RowSelected) -> None:
        # Enter on the focused table selects its row (the table's own binding).
        self.action_logs()

    def action_logs(self) -> None:
        job_id = self.selected_id
        if job_id is not None:
            self.post_message(OpenLogs(job_id))
