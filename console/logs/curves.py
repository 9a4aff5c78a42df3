"""Training curves: each rank's loss and steps/s over its steps, as the step parser read
them, kept bounded; the min/median/max band across ranks; ``steps.csv``.

:class:`CurveStore` takes the step tracker's per-rank snapshots (``StepTracker.ranks()``)
and keeps a point whenever a rank's step moved: what the logs screen's curves draw. Past
``max_points`` a rank's points are halved (every other one kept), so a long run keeps
its whole shape at a coarser grain. Core: no textual.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from console.logs.models import RankKey
from console.logs.steps import RankSteps

MAX_POINTS = 2000  # per rank
BAND_RANKS = 16  # more ranks than this: one min/median/max band instead of a line each
BAND_BINS = 200  # steps grid of a band
FIGURES = ("loss", "rate", "samples")  # rate: steps per second; samples: samples/s


@dataclass(frozen=True, slots=True)
class CurvePoint:
    time: float | None  # when the console read it (None: from a file, not known)
    step: int
    loss: float | None
    rate: float | None  # steps/s
    samples: float | None = None  # samples/s where the trainer prints it

    def figure(self, name: str) -> float | None:
        value: float | None = getattr(self, name)
        return value


@dataclass(frozen=True, slots=True)
class Band:
    steps: tuple[float, ...]
    low: tuple[float, ...]
    median: tuple[float, ...]
    high: tuple[float, ...]


class CurveStore:
    def __init__(self, max_points: int = MAX_POINTS) -> None:
        self.max_points = max_points
        self._points: dict[RankKey, list[CurvePoint]] = {}

    def record(self, ranks: Iterable[RankSteps], now: float, *, timed: bool = True) -> int:
        """A point for each rank whose step moved since its last point; how many.
        ``timed=False``: the lines carried no receive time (read from files)."""
        added = 0
        for rank in ranks:
            if rank.step is None:
                continue
            points = self._points.setdefault(rank.key, [])
            if points and points[-1].step == rank.step:
                continue
            when = (rank.last_step_at if rank.last_step_at is not None else now) if timed else None
            points.append(
                CurvePoint(when, rank.step, rank.loss, rank.steps_per_s, rank.samples_per_s)
            )
            added += 1
            if len(points) > self.max_points:
                kept = points[::2]
                if kept[-1] is not points[-1]:
                    kept.append(points[-1])  # the newest point always stays
                points[:] = kept
        return added

    def curves(self) -> dict[RankKey, tuple[CurvePoint, ...]]:
        return {key: tuple(points) for key, points in sorted(self._points.items(), key=_order)}

    def __len__(self) -> int:
        return sum(len(p) for p in self._points.values())


def _order(item: tuple[RankKey, object]) -> tuple[int, int, str]:
    key = item[0]
    return (0, key, "") if isinstance(key, int) else (1, 0, str(key))


def series(points: Sequence[CurvePoint], figure: str) -> tuple[list[float], list[float]]:
    """(steps, values) of one rank's figure, points without it left out."""
    xs: list[float] = []
    ys: list[float] = []
    for p in points:
        value = p.figure(figure)
        if value is not None:
            xs.append(float(p.step))
            ys.append(value)
    return xs, ys


def band(
    curves: Mapping[RankKey, Sequence[CurvePoint]], figure: str, bins: int = BAND_BINS
) -> Band:
    """Min, median and max across ranks of ``figure``, on a grid of steps: each rank
    gives its last value in each bin of steps it reached (a rank behind the others is
    absent from the later bins, so a straggler narrows the band, then leaves it)."""
    every = [series(points, figure) for points in curves.values()]
    steps = [x for xs, _ys in every for x in xs]
    if not steps:
        return Band((), (), (), ())
    first, last = min(steps), max(steps)
    width = max(1.0, (last - first) / bins)
    per_bin: dict[int, list[float]] = {}
    for xs, ys in every:
        mine: dict[int, float] = {}
        for x, y in zip(xs, ys, strict=True):
            mine[int((x - first) // width)] = y
        for b, y in mine.items():
            per_bin.setdefault(b, []).append(y)
    grid = sorted(per_bin)
    return Band(
        tuple(first + (b + 1) * width if b < bins else last for b in grid),
        tuple(min(per_bin[b]) for b in grid),
        tuple(statistics.median(per_bin[b]) for b in grid),
        tuple(max(per_bin[b]) for b in grid),
    )


CSV_COLUMNS = ("time", "rank", "step", "loss", "rate")


def steps_csv(curves: Mapping[RankKey, Sequence[CurvePoint]]) -> str:
    """``time,rank,step,loss,rate`` rows (rank by rank, in step order); empty where
    a figure was not printed; time in epoch seconds (empty where not known)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for key, points in curves.items():
        for p in points:
            writer.writerow(
                (
                    "" if p.time is None else f"{p.time:.3f}",
                    key,
                    p.step,
                    "" if p.loss is None else repr(p.loss),
                    "" if p.rate is None else f"{p.rate:.6g}",
                )
            )
    return out.getvalue()
