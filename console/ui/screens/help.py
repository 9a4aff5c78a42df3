"""``?``: every key that works on the screen below, with what it does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static


@dataclass(frozen=True, slots=True)
class KeyHelp:
    key: str
    description: str
    scope: str  # "app", the screen's name or the widget's


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "dismiss_help", "Close", show=True),
        Binding("question_mark", "dismiss_help", "Close", key_display="?", show=False),
    ]

    def __init__(self, keys: Sequence[KeyHelp]) -> None:
        super().__init__()
        self.keys = tuple(keys)

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static("Keys  (Esc or ? closes)", id="help-title")
            table: DataTable[Text] = DataTable(id="help-keys", cursor_type="row")
            table.add_columns("Key", "Does", "Where")
            for item in self.keys:
                table.add_row(Text(item.key), Text(item.description), Text(item.scope))
            yield table

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
