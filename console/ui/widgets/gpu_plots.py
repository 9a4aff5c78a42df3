"""The host detail's history plots: one plot per figure, one line per GPU (plotext)."""

from __future__ import annotations

from collections.abc import Sequence

from textual_plotext import PlotextPlot

from console.ui.gpu_history import Series

# figure -> (title, y range): fixed ranges, so a flat line does not fill the plot.
PLOTS: dict[str, tuple[str, tuple[float, float]]] = {
    "util": ("utilization %", (0.0, 100.0)),
    "memory": ("memory used %", (0.0, 100.0)),
    "temp": ("temperature °C", (20.0, 100.0)),
}


class GpuHistoryPlot(PlotextPlot):
    """One figure's history for every GPU of a host; re-drawn when ``show`` is called."""

    def __init__(self, figure: str, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="gpu-plot")
        self.figure = figure
        self.series: tuple[Series, ...] = ()

    def show(self, series: Sequence[Series]) -> None:
        self.series = tuple(series)
        title, (low, high) = PLOTS[self.figure]
        plt = self.plt
        plt.clear_data()
        plt.title(title)
        plt.ylim(low, high)
        plt.xlabel("seconds ago")
        drawn = 0
        for each in self.series:
            points = [
                (t, v) for t, v in zip(each.seconds, each.values, strict=True) if v is not None
            ]
            if not points:
                continue
            xs, ys = zip(*points, strict=True)
            plt.plot(list(xs), list(ys), marker="braille", label=f"gpu{each.gpu}")
            drawn += 1
        if not drawn:
            plt.title(f"{title}: no samples yet")
        self.refresh()
