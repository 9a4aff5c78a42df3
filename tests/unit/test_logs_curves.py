"""Curve points from the step parser's per-rank progress: a point per new step, halved
past the bound (the newest kept), the min/median/max band across ranks, steps.csv."""

from __future__ import annotations

import csv
import io

from console.logs.curves import CurvePoint, CurveStore, band, steps_csv
from console.logs.models import LogLine, RankKey
from console.logs.steps import StepTracker


def lines(step: int, ranks: int, *, at: float) -> list[LogLine]:
    return [
        LogLine("j", "n0", r, r, "stdout", f"step {step} loss {1 / (step + r + 1):.5f}", at)
        for r in range(ranks)
    ]


def test_a_point_per_new_step_of_each_rank() -> None:
    tracker, store = StepTracker(), CurveStore()
    for i, step in enumerate((1, 2, 2, 3)):
        tracker.feed(lines(step, 2, at=100.0 + i))
        store.record(tracker.ranks(), now=200.0)
    curves = store.curves()
    assert list(curves) == [0, 1]
    assert [p.step for p in curves[0]] == [1, 2, 3]  # the repeated step 2: one point
    assert curves[1][-1].loss == 1 / 5
    assert curves[0][0].time == 100.0  # when the step arrived


def test_past_the_bound_every_other_point_is_kept_and_the_newest_stays() -> None:
    tracker, store = StepTracker(), CurveStore(max_points=10)
    for step in range(1, 26):
        tracker.feed(lines(step, 1, at=float(step)))
        store.record(tracker.ranks(), now=0.0)
    steps = [p.step for p in store.curves()[0]]
    assert len(steps) <= 10 and steps[0] == 1 and steps[-1] == 25
    assert steps == sorted(steps)


def test_band_min_median_max_and_a_straggler_leaving_it() -> None:
    def ranked(rate: float, last: int) -> tuple[CurvePoint, ...]:
        return tuple(CurvePoint(0.0, s, None, rate) for s in range(0, last + 1, 10))

    curves: dict[RankKey, tuple[CurvePoint, ...]] = {
        0: ranked(10.0, 100),
        1: ranked(12.0, 100),
        2: ranked(2.0, 50),
    }
    b = band(curves, "rate", bins=10)
    assert b.low[0] == 2.0 and b.median[0] == 10.0 and b.high[0] == 12.0
    assert b.low[-1] == 10.0  # past step 50 the straggler is absent
    assert band({}, "loss").steps == ()


def test_steps_csv() -> None:
    curves: dict[RankKey, tuple[CurvePoint, ...]] = {
        0: (CurvePoint(1.5, 10, 0.25, 3.0), CurvePoint(2.5, 20, None, None)),
        "worker1": (CurvePoint(None, 5, 1.0, None),),
    }
    rows = list(csv.reader(io.StringIO(steps_csv(curves))))
    assert rows == [
        ["time", "rank", "step", "loss", "rate"],
        ["1.500", "0", "10", "0.25", "3"],
        ["2.500", "0", "20", "", ""],
        ["", "worker1", "5", "1.0", ""],
    ]
