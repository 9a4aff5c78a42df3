"""The logs screen's rank chooser (``r``): tick the ranks whose lines the view shows."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import SelectionList, Static

from console.logs.models import RankKey, rank_label


class ChooseRanks(ModalScreen[list[RankKey] | None]):
    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        # Priority: in a SelectionList Enter would toggle the option instead.
        Binding("enter", "done", "Show", priority=True),
    ]

    def __init__(self, ranks: Sequence[RankKey], chosen: Sequence[RankKey] | None) -> None:
        super().__init__()
        self.ranks = list(ranks)
        self.chosen = set(chosen if chosen is not None else ranks)

    def compose(self) -> ComposeResult:
        with Vertical(id="ranks-box"):
            yield Static("Ranks to show (space toggles, Enter shows, Esc cancels)")
            yield SelectionList[str](
                *[(rank_label(k), repr(k), k in self.chosen) for k in self.ranks], id="ranks"
            )

    def on_mount(self) -> None:
        choices = self.query_one("#ranks", SelectionList)
        choices.highlighted = 0
        choices.focus()

    def action_done(self) -> None:
        picked = set(self.query_one("#ranks", SelectionList).selected)
        self.dismiss([k for k in self.ranks if repr(k) in picked])

    def action_cancel(self) -> None:
        self.dismiss(None)
