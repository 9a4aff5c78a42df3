"""The hosts table: one row per inventory host, cells rewritten only when a host changes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from rich.cells import cell_len
from rich.text import Text
from textual.theme import Theme
from textual.widgets.data_table import ColumnKey

from console import display
from console.inventory import Host
from console.transport.base import HostState, HostStatus
from console.ui.formatting import plain
from console.ui.theming import state_colour
from console.ui.widgets.row_table import RowTable

COLUMNS: tuple[tuple[str, str], ...] = (
    ("name", "Host"),
    ("address", "Address"),
    ("state", "State"),
    ("latency", "Latency"),
    ("last_seen", "Last seen"),
    ("tags", "Tags"),
    # Last, so a narrow terminal cuts the reason (shown in full below the table) first.
    ("reason", "Reason"),
)
REASON_MIN_WIDTH = 20
# Columns whose cells change as hosts come and go, sized by this table: DataTable's own
# ``update_width`` re-measures the whole column for every cell that got narrower, which is
# quadratic in hosts (0.25 s of a 64-host start, seconds at 256).
FITTED = ("state", "latency", "last_seen")


class HostTable(RowTable):
    """Rows are keyed by host name; ``apply`` takes a batch of statuses at once."""

    def __init__(
        self,
        hosts: Iterable[Host],
        *,
        clock: Callable[[], float],
        id: str | None = None,
    ) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self._hosts = {h.name: h for h in hosts}
        self._clock = clock
        self.statuses: dict[str, HostStatus] = {}  # what the rows show (the store owns the truth)
        self._rows_ready = False
        # Per fitted column: each row's cell width, and how many rows have each width.
        self._widths: dict[str, dict[str, int]] = {key: {} for key in FITTED}
        self._width_counts: dict[str, Counter[int]] = {key: Counter() for key in FITTED}

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key, width=REASON_MIN_WIDTH if key == "reason" else None)
        for host in self._hosts.values():
            self._note_width(host.name, "state", HostState.CONNECTING.value)
            self._note_width(host.name, "latency", display.latency(None))
            self._note_width(host.name, "last_seen", "never")
            self.add_row(
                plain(host.name),
                plain(display.address(host)),
                self._state_text(HostState.CONNECTING),
                plain(display.latency(None)),
                plain("never"),
                plain(", ".join(host.tags)),
                plain(""),
                key=host.name,
            )
        self._rows_ready = True
        # Statuses can arrive before the rows exist (a fast first batch); show them now.
        now = self._clock()
        for status in self.statuses.values():
            self._write_row(status, now)
        self.app.theme_changed_signal.subscribe(self, self._recolour_states)

    def _state_text(self, state: HostState) -> Text:
        colour = state_colour(self.app.current_theme, state.value)
        return Text(state.value, style=f"bold {colour}")

    def apply(self, statuses: Iterable[HostStatus]) -> None:
        """Take a batch of status changes (latest per host wins) and rewrite those rows."""
        now = self._clock()
        for status in statuses:
            if status.name not in self._hosts:
                continue
            self.statuses[status.name] = status
            if self._rows_ready:
                self._write_row(status, now)
        if self._rows_ready:
            self.call_after_refresh(self.fit_reason_column)

    @property
    def _reason_width(self) -> int:
        return self.columns[ColumnKey("reason")].width

    def on_resize(self) -> None:
        self.fit_reason_column()

    def fit_reason_column(self) -> None:
        """Give the reason column what the others leave, so the table needs no side scroll."""
        if not self._rows_ready:
            return
        others = sum(
            column.get_render_width(self)
            for key, column in self.columns.items()
            if key.value != "reason"
        )
        padding = 2 * self.cell_padding
        width = max(REASON_MIN_WIDTH, self.scrollable_content_region.width - others - padding)
        column = self.columns[ColumnKey("reason")]
        if width == column.width:
            return
        column.width = width
        for status in self.statuses.values():
            self.update_cell(status.name, "reason", plain(display.clip(status.reason, width)))
        # DataTable recomputes its virtual size only when told its dimensions changed.
        self._require_update_dimensions = True
        self.refresh()

    def _write_row(self, status: HostStatus, now: float) -> None:
        row = status.name
        self._set_fitted(row, "state", self._state_text(status.state))
        self.update_cell(row, "reason", plain(display.clip(status.reason, self._reason_width)))
        self._set_fitted(row, "latency", plain(display.latency(status.latency_ms)))
        self._set_fitted(row, "last_seen", plain(self._last_seen(status, now)))

    def _note_width(self, row: str, column: str, text: str) -> bool:
        """Record a cell's width; True when the column's widest cell changed."""
        widths, counts = self._widths[column], self._width_counts[column]
        width = cell_len(text)
        old = widths.get(row)
        if old == width:
            return False
        widest = max(counts) if counts else 0
        if old is not None:
            counts[old] -= 1
            if not counts[old]:
                del counts[old]
        widths[row] = width
        counts[width] += 1
        return max(counts) != widest

    def _set_fitted(self, row: str, column: str, cell: Text) -> None:
        shown = self.get_cell(row, column)
        if isinstance(shown, Text) and shown.plain == cell.plain and shown.style == cell.style:
            return  # an unchanged cell would still cost the table a refresh
        self.update_cell(row, column, cell)
        if self._note_width(row, column, cell.plain):
            key = ColumnKey(column)
            label = self.columns[key].label
            self.columns[key].content_width = max(
                cell_len(label.plain), *self._width_counts[column]
            )
            self._require_update_dimensions = True
            self.refresh()

    def _last_seen(self, status: HostStatus, now: float) -> str:
        # An up host is being seen right now; the stored time is only when it last answered.
        if status.is_up:
            return "now"
        return display.ago(status.last_seen, now)

    def refresh_ages(self) -> None:
        """Re-render the relative "last seen" times (called by a timer)."""
        if not self._rows_ready:
            return
        now = self._clock()
        for status in self.statuses.values():
            self._set_fitted(status.name, "last_seen", plain(self._last_seen(status, now)))

    def _recolour_states(self, _theme: Theme) -> None:
        if not self._rows_ready:
            return
        for status in self.statuses.values():
            self._set_fitted(status.name, "state", self._state_text(status.state))

    def state_of(self, name: str) -> str:
        """The state shown in the row of ``name`` (what the user reads)."""
        return self.text_of(name, "state")

    def text_of(self, name: str, column: str) -> str:
        cell = self.get_cell(name, column)
        return cell.plain if isinstance(cell, Text) else str(cell)

    @property
    def selected_host(self) -> str | None:
        if not self.row_count:
            return None
        row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        return row_key.value
