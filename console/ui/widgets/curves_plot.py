"""One training figure (loss, or steps/s) over steps: a line per rank, or past
``BAND_RANKS`` ranks the min/median/max band across them (textual-plotext)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from textual_plotext import PlotextPlot

from console.logs.curves import BAND_RANKS, CurvePoint, band, series
from console.logs.models import RankKey, rank_label

TITLES = {"loss": "loss", "rate": "steps/s", "samples": "samples/s"}


class CurvesPlot(PlotextPlot):
    def __init__(self, figure: str, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="curves-plot")
        self.figure = figure
        self.lines = 0  # what the last draw drew: lines, or 3 for a band
        self.banded = False

    def show(self, curves: Mapping[RankKey, Sequence[CurvePoint]]) -> None:
        title = TITLES[self.figure]
        plt = self.plt
        plt.clear_data()
        plt.xlabel("step")
        self.banded = len(curves) > BAND_RANKS
        self.lines = 0
        if self.banded:
            b = band(curves, self.figure)
            if b.steps:
                for values, label in ((b.high, "max"), (b.median, "median"), (b.low, "min")):
                    plt.plot(list(b.steps), list(values), marker="braille", label=label)
                    self.lines += 1
            plt.title(f"{title}: min/median/max of {len(curves)} ranks")
        else:
            for key, points in curves.items():
                xs, ys = series(points, self.figure)
                if xs:
                    plt.plot(xs, ys, marker="braille", label=rank_label(key))
                    self.lines += 1
            plt.title(f"{title} per rank")
        if not self.lines:
            plt.title(f"{title}: not printed yet")
        self.refresh()
