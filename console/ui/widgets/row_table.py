"""A table of rows (jobs, hosts) where Home and End go to the first and last row.

DataTable's own Home/End scroll its columns sideways and leave the cursor where it was:
in a list of rows the keys are expected to move the selection."""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable


class RowTable(DataTable[str | Text]):
    BINDINGS = [
        Binding("home,ctrl+home", "first_row", "First row", show=False),
        Binding("end,ctrl+end", "last_row", "Last row", show=False),
    ]

    def action_first_row(self) -> None:
        if self.row_count:
            self.move_cursor(row=0)

    def action_last_row(self) -> None:
        if self.row_count:
            self.move_cursor(row=self.row_count - 1)
