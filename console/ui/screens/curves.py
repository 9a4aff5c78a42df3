"""Training curves of the job whose logs are open (``c`` on the logs screen, and the
palette): loss and steps/s per rank over steps, read from the logs by the step parser
(the logs screen's ``CurveStore``); one line per rank, min/median/max past 16 ranks.
``s`` switches the lower plot to samples/s (where printed) and back. Redrawn every
``refresh_s`` while shown; q, Esc or c go back to the logs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Header, Static

from console.logs.curves import BAND_RANKS, CurvePoint, CurveStore
from console.logs.models import RankKey
from console.ui.widgets.curves_plot import CurvesPlot
from console.ui.widgets.keys_footer import KeysFooter

CURVES_BINDING = Binding("c", "curves", "Curves")


class CurvesScreen(Screen[None]):
    BINDINGS = [
        Binding("q,escape,c", "back", "Back"),
        Binding("s", "samples", "Steps/s or samples/s"),
    ]
    DEFAULT_CSS = """
    CurvesScreen .curves-plot { height: 1fr; }
    CurvesScreen #curves-summary { height: 1; }
    """

    def __init__(
        self, job_id: str, store: CurveStore, refresh_s: float, *,
        before: Callable[[], None] | None = None,
    ) -> None:  # fmt: skip
        """``before``: called ahead of each redraw (the logs screen records new points)."""
        super().__init__(name=f"curves:{job_id}")
        self.job_id = job_id
        self.store = store
        self.refresh_s = refresh_s
        self.before = before

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="curves-summary", markup=False)
        yield CurvesPlot("loss", id="curves-loss")
        yield CurvesPlot("rate", id="curves-rate")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.redraw()
        self.set_interval(self.refresh_s, self.redraw)

    def redraw(self) -> None:
        if self.before is not None:
            self.before()
        curves = self.store.curves()
        self.query_one("#curves-summary", Static).update(summary(self.job_id, curves))
        for plot in self.query(CurvesPlot):
            plot.show(curves)

    def action_samples(self) -> None:
        """The lower plot: steps/s, or samples/s where the trainers print them."""
        plot = self.query_one("#curves-rate", CurvesPlot)
        plot.figure = "samples" if plot.figure == "rate" else "rate"
        self.redraw()

    def action_back(self) -> None:
        self.dismiss(None)


def summary(job_id: str, curves: Mapping[RankKey, Sequence[CurvePoint]]) -> str:
    if not curves:
        return f"{job_id}: no steps read from the logs yet"
    last = max((p[-1].step for p in curves.values() if p), default=0)
    how = "min/median/max across ranks" if len(curves) > BAND_RANKS else "a line per rank"
    return f"{job_id}: {len(curves)} ranks, steps up to {last}; {how}"
