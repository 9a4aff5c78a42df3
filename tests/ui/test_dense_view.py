"""The dense GPU view driven with Pilot at 256 hosts x 8 GPUs, on a 200x50 terminal.

The views are fixed (dense_fixtures: the captured 8 x H100 nvidia-smi table, figures
set per host) and go through the app's own store, as a monitor's batches would.
"""

from __future__ import annotations

from typing import Any

from dense_fixtures import HOSTS, dense_inventory, dense_statuses, dense_views, name
from textual.pilot import Pilot
from textual.widgets import Static
from ui_fixtures import FROZEN_NOW

from console.ui.app import DistConsoleApp
from console.ui.attention import host_needs_attention
from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.host_detail import HostDetailScreen
from console.ui.widgets.gpu_grid import GpuGrid
from console.ui.widgets.gpu_panel import HostPanel
from console.ui.widgets.gpu_plots import GpuHistoryPlot

SIZE = (200, 50)
SAMPLES = 3


def make_app() -> DistConsoleApp:
    return DistConsoleApp(dense_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)


async def open_dense(app: DistConsoleApp, pilot: Pilot[Any]) -> ClusterScreen:
    await pilot.press("g")
    await pilot.pause()
    app.apply_statuses(dense_statuses())
    for step in range(SAMPLES):
        app.apply_views(dense_views(step))
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, ClusterScreen) and screen.dense
    return screen


def text_of(screen: ClusterScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


def grid_text(grid: GpuGrid) -> str:
    return "\n".join(grid.line_text(i) for i in range(len(grid.grid.lines)))


async def test_256_hosts_fit_200x50_with_summary_and_legend() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_dense(app, pilot)
        grid = screen.grid
        assert app.focused is grid
        assert screen.visible_hosts() == [name(i) for i in range(HOSTS)]
        # Every host on screen at once: no line below the grid's height, nothing to scroll.
        assert len(grid.grid.lines) <= grid.size.height and grid.max_scroll_y == 0
        assert grid.shape.cell_width == 3 and grid.shape.per_row == 6
        text = grid_text(grid)
        assert "node252 ✗ auth-failed" in text and "node250 ✗ down" in text
        assert "node253 … connecting" in text
        # node005's GPU 3 is hot: its cell carries "!" whatever job holds it.
        assert "node005 ██a██a██a██!" in text
        summary = text_of(screen, "#cluster-summary")
        assert "256 hosts (252 up, 3 down, 1 waiting)" in summary
        assert "2016 GPUs:" in summary and "3 hot" in summary
        assert "5 GPUs need attention" in summary
        legend = text_of(screen, "#grid-legend")
        assert "utilization" in legend and "needs attention" in legend
        assert "a llama-70b 1024 GPUs" in legend and "b resnet-ddp 256 GPUs" in legend


async def test_filter_attention_and_escape_in_the_dense_view() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_dense(app, pilot)
        await pilot.press("slash", *"rack7")
        await pilot.pause()
        assert screen.visible_hosts() == [name(i) for i in range(224, 256)]
        await pilot.press("enter")
        await pilot.pause()
        assert app.focused is screen.grid  # the box gives the keys back to the grid
        assert "filter: 'rack7'" in text_of(screen, "#cluster-summary")
        await pilot.press("a")
        await pilot.pause()
        # rack7 holds the two down hosts, the auth-failed and the connecting one.
        assert screen.visible_hosts() == ["node250", "node251", "node252", "node253"]
        await pilot.press("escape")
        await pilot.pause()
        views = app.store.views
        expected = [
            name(i)
            for i in range(HOSTS)
            if name(i) not in views or host_needs_attention(views[name(i)], screen.thresholds)
        ]
        # 5 hot/full/idle GPUs on 4 hosts, 2 down, 1 auth-failed, 1 connecting.
        assert screen.visible_hosts() == expected and len(expected) == 8
        assert "node005" in expected and "node130" in expected
        assert "ATTENTION VIEW" in text_of(screen, "#cluster-summary")
        await pilot.press("slash", *"no-such-host")
        await pilot.pause()
        assert screen.visible_hosts() == []
        assert screen.query_one("#no-match", Static).display
        await pilot.press("escape", "a")
        await pilot.pause()
        assert len(screen.visible_hosts()) == HOSTS


def mean_util(app: DistConsoleApp, host: str) -> float:
    view = app.store.views[host]
    assert view.sample is not None
    utils = [g.utilization_gpu or 0.0 for g in view.sample.gpus]
    return sum(utils) / len(utils)


async def test_sort_and_group_keys() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_dense(app, pilot)
        await pilot.press("s")  # name -> util
        await pilot.pause()
        assert screen.grid.sort == "util" and "sort (util)" in text_of(screen, "#grid-legend")
        order = screen.visible_hosts()
        live = [h for h in order if app.store.views.get(h) and app.store.views[h].live]
        figures = [mean_util(app, h) for h in live]
        assert figures == sorted(figures, reverse=True) and figures[0] > figures[-1]
        assert order[: len(live)] == live  # down and waiting hosts last
        await pilot.press("s", "s", "s")  # memory, temp, job
        await pilot.pause()
        assert screen.grid.sort == "job"
        order = screen.visible_hosts()
        # A job's hosts together, jobs by name (bert-mpi, eval-sweep, llama-70b, ...).
        jobs = [*range(160, 176), *range(176, 184), *range(0, 128), *range(128, 160)]
        assert order[: len(jobs)] == [name(i) for i in jobs]
        await pilot.press("s")  # back to name
        await pilot.press("b")  # group by tag
        await pilot.pause()
        lines = screen.grid.grid.lines
        assert lines[0] == ("rack0 (32 hosts)", ())
        assert sum(1 for heading, _ in lines if heading) == 8
        await pilot.press("b")  # by job
        await pilot.pause()
        headings = [heading for heading, _ in screen.grid.grid.lines if heading]
        assert headings[0] == "bert-mpi (16 hosts)" and headings[-1].startswith("(no job)")
        assert "group (job)" in text_of(screen, "#grid-legend")


async def test_metric_key_shows_memory() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_dense(app, pilot)
        # node200 is idle with 1 MiB in use: utilization 0-2% and memory ~0 both "·".
        # node140's GPU 2 is 99% full: "!" under utilization, a full block under memory.
        before = screen.grid.line_text(screen.grid.grid.where["node140"][0])
        await pilot.press("m")
        await pilot.pause()
        assert screen.grid.metric == "memory"
        assert "memory used" in text_of(screen, "#grid-legend")
        after = screen.grid.line_text(screen.grid.grid.where["node140"][0])
        assert before != after


async def test_cursor_and_enter_open_the_host_with_its_plots() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_dense(app, pilot)
        assert screen.grid.cursor == "node000"
        await pilot.press("right", "down", "down")
        await pilot.pause()
        assert screen.grid.cursor == "node013"  # 6 hosts a line
        await pilot.press("enter")
        await pilot.pause()
        detail = app.screen
        assert isinstance(detail, HostDetailScreen) and detail.host.name == "node013"
        plot = detail.query_one("#plot-util", GpuHistoryPlot)
        assert [s.gpu for s in plot.series] == list(range(8))
        assert all(len(s.values) == SAMPLES for s in plot.series)
        assert plot.series[0].seconds == (-2.0, -1.0, 0.0)
        app.apply_views(dense_views(SAMPLES))  # a new sample reaches the open detail
        await pilot.pause()
        assert len(plot.series[0].values) == SAMPLES + 1
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is screen and screen.grid.cursor == "node013"


async def test_v_switches_to_panels_and_back_keeping_the_host() -> None:
    """The detailed view at 256 hosts: the filter and the attention view show panels
    with their GPUs (the issue saw them blank at 32 hosts)."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_dense(app, pilot)
        await pilot.press("right", "right")
        await pilot.press("v")
        await pilot.pause()
        assert not screen.dense and len(screen.query(HostPanel)) == HOSTS
        assert isinstance(app.focused, HostPanel) and app.focused.host.name == "node002"
        await pilot.press("slash", *"node13")
        await pilot.press("enter")
        await pilot.pause()
        shown = screen.visible_hosts()
        assert shown == [f"node{i}" for i in range(130, 140)]
        await pilot.pause()
        panel = screen.query_one("#panel-node130", HostPanel)
        assert panel.region.height > 0  # laid out and on screen
        assert "H100 80GB HBM3" in panel.render().plain
        await pilot.press("escape", "a")
        await pilot.pause()
        assert "node005" in screen.visible_hosts() and len(screen.visible_hosts()) == 8
        hot = screen.query_one("#panel-node005", HostPanel)
        assert "hot" in hot.render().plain
        await pilot.press("v")
        await pilot.pause()
        assert screen.dense and screen.visible_hosts() == screen.grid.visible_hosts()
        assert len(screen.visible_hosts()) == 8  # the attention view carries over
