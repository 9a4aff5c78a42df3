"""Training curves on the logs screen (c, and the palette): loss and steps/s per rank
over steps at 80x24 and 200x50; past 16 ranks a min/median/max band. Lines are fed to
the logs screen as the follower delivers them (the follower itself runs over real sshd
in tests/integration and tests/ui/test_logs_live.py)."""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Static
from ui_fixtures import FROZEN_NOW

from console.inventory import Host, Inventory
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.logs.models import LogBatch, LogLine
from console.ui.app import DistConsoleApp
from console.ui.palette import palette_commands
from console.ui.screens.curves import CurvesScreen
from console.ui.screens.logs import LogsScreen
from console.ui.widgets.curves_plot import CurvesPlot

INVENTORY = Inventory(
    path="/srv/hosts.yaml",
    hosts=tuple(Host(name=f"node{i}", address=f"10.0.0.{10 + i}") for i in range(4)),
)


def batch(job: str, step: int, ranks: int, *, slow: int | None = None) -> LogBatch:
    """One step of every rank (rank ``slow`` stays 5 steps behind, at a lower rate)."""
    lines = []
    for rank in range(ranks):
        at = step - 5 if rank == slow else step
        rate = 4.0 if rank == slow else 10.0 + rank % 3
        text = (
            f"rank {rank} step {at} loss {2.0 / (at + 1):.4f} steps/s {rate} samples/s {rate * 32}"
        )
        host = f"node{rank % 4}"
        lines.append(LogLine(job, host, rank, rank // 4, "stdout", text, FROZEN_NOW + step))
    return LogBatch("node0", tuple(lines), received=FROZEN_NOW + step)


async def logs_with_steps(pilot: Pilot[Any], ranks: int) -> LogsScreen:
    app = pilot.app
    assert isinstance(app, DistConsoleApp)
    spec = make_spec(kind="ddp", program="example:ddp", gpus_per_host=ranks // 4)
    job = plan(spec, INVENTORY, job_id=f"curves-{ranks}")
    screen = LogsScreen(job, app.services, follow_hosts=False)
    await app.push_screen(screen)
    await pilot.pause()
    for step in range(10, 60, 5):  # as batches arrive over time, between refreshes
        screen.apply_batches([batch(job.job_id, step, ranks, slow=1)])
        screen.panels.refresh_steps()
    await pilot.pause()
    return screen


def make_app() -> DistConsoleApp:
    return DistConsoleApp(INVENTORY, connections_factory=None, clock=lambda: FROZEN_NOW)


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_curves_key_shows_loss_and_rate_per_rank(size: tuple[int, int]) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        logs = await logs_with_steps(pilot, 8)
        await pilot.press("c")
        await pilot.pause()
        curves = app.screen
        assert isinstance(curves, CurvesScreen)
        loss, rate = (
            curves.query_one("#curves-loss", CurvesPlot),
            curves.query_one("#curves-rate", CurvesPlot),
        )
        assert (loss.lines, rate.lines) == (8, 8) and not loss.banded
        for plot in (loss, rate):  # both on screen, side by side in height
            assert plot.region.height >= 8 and plot.region.width == size[0]
        summary = str(curves.query_one("#curves-summary", Static).render())
        assert "curves-8: 8 ranks, steps up to 55; a line per rank" in summary
        points = logs.panels.curves.curves()
        assert [p.step for p in points[0]] == list(range(10, 60, 5))
        assert [p.step for p in points[1]][-1] == 50  # the straggler, 5 behind
        # Steps/s as the step parser measures them: 5 steps per 5 s of arrivals.
        assert points[1][-1].rate == 1.0 and points[0][-1].loss == pytest.approx(2 / 56, 1e-3)
        await pilot.press("s")  # the lower plot: samples/s as printed
        assert rate.figure == "samples" and rate.lines == 8
        assert points[1][-1].samples == 128.0
        await pilot.press("s")
        assert rate.figure == "rate"
        await pilot.press("c")  # back to the logs
        assert app.screen is logs


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_past_16_ranks_a_min_median_max_band(size: tuple[int, int]) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await logs_with_steps(pilot, 24)
        await pilot.press("c")
        await pilot.pause()
        curves = app.screen
        assert isinstance(curves, CurvesScreen)
        rate = curves.query_one("#curves-rate", CurvesPlot)
        assert rate.banded and rate.lines == 3
        assert "min/median/max across ranks" in str(
            curves.query_one("#curves-summary", Static).render()
        )
        await pilot.press("escape")
        assert isinstance(app.screen, LogsScreen)


async def test_palette_offers_curves_on_the_logs_screen_only() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        titles = [c.title for c in palette_commands(app, app.screen)]
        assert "Training curves" not in titles
        logs = await logs_with_steps(pilot, 8)
        offered = {c.title: c for c in palette_commands(app, logs)}
        offered["Training curves"].callback()
        await pilot.pause()
        assert isinstance(app.screen, CurvesScreen)
