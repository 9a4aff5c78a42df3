"""The cluster screen's cheap path: panels out of view are painted when they come into view.

A new sample for a panel outside the scroll view is kept without a repaint (repainting an
off-screen widget makes Textual re-arrange the whole screen); the panel must still show
that sample, at the right height, as soon as it is scrolled into view. The views are fixed
HostView values (this machine has no GPU).
"""

from __future__ import annotations

import html
from dataclasses import replace
from typing import Any

from ui_fixtures import FROZEN_NOW, gpu_inventory, gpu_views

from console.probe.models import GpuProcess
from console.ui.app import DistConsoleApp
from console.ui.screens.cluster import ClusterScreen
from console.ui.widgets.gpu_panel import HostPanel


def make_app() -> DistConsoleApp:
    return DistConsoleApp(gpu_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)


def screen_text(app: DistConsoleApp) -> str:
    """What the terminal shows, as text (from Textual's own screenshot)."""
    return html.unescape(app.export_screenshot()).replace("\xa0", " ")


async def open_gpus(app: DistConsoleApp, pilot: Any) -> ClusterScreen:
    await pilot.press("g")
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, ClusterScreen)
    for step in range(3):
        app.apply_views(gpu_views(step))
    await pilot.pause()
    return screen


def node2_with(step: int, util: float, *processes: GpuProcess) -> dict[str, Any]:
    view = gpu_views(step)["node2"]
    assert view.sample is not None
    first, second = view.sample.gpus
    gpus = (replace(first, utilization_gpu=util, processes=processes), second)
    return {"node2": replace(view, sample=replace(view.sample, gpus=gpus))}


async def show(pilot: Any, panel: HostPanel) -> None:
    # Scrolled as with the mouse wheel: no focus change (that alone would repaint).
    panel.scroll_visible(animate=False)
    await pilot.pause()
    await pilot.pause()


async def test_off_screen_panel_shows_its_latest_sample_when_scrolled_into_view() -> None:
    app = make_app()
    async with app.run_test(size=(130, 20)) as pilot:
        screen = await open_gpus(app, pilot)
        node0 = screen.query_one("#panel-node0", HostPanel)
        node2 = screen.query_one("#panel-node2", HostPanel)
        assert node0.in_view()
        assert not node2.in_view(), "the terminal is meant to be too short for node2"
        # Painted once (idle), then scrolled away again.
        await show(pilot, node2)
        assert node2.in_view() and " 0%" in screen_text(app)
        await show(pilot, node0)
        assert not node2.in_view()
        height = node2.outer_size.height

        # Same height, new figures: nothing but the deferred paint can show them.
        app.apply_views(node2_with(3, 63.0))
        await pilot.pause()
        assert node2.view is not None and node2.view.sample is not None
        assert node2.view.sample.gpus[0].utilization_gpu == 63.0  # the data is there at once
        await show(pilot, node2)
        assert "63%" in screen_text(app)

        # One line taller (a process) while out of view: laid out again when shown.
        await show(pilot, node0)
        assert not node2.in_view()
        process = GpuProcess(pid=9191, command="python offscreen.py", user="carol")
        app.apply_views(node2_with(4, 71.0, process))
        await pilot.pause()
        assert "pid 9191" not in screen_text(app)
        await show(pilot, node2)
        shown = screen_text(app)
        assert "71%" in shown and "pid 9191" in shown and "python offscreen.py" in shown
        assert node2.outer_size.height == height + 1 == node2.content_lines() + 2


async def test_counted_lines_match_the_rendered_panel() -> None:
    """The panel's height comes from content_lines(), not from rendering it: they agree
    for every host of the fixture (GPUs, processes, more processes than shown, no GPU,
    down), with the attention view off and on."""
    app = make_app()
    async with app.run_test(size=(130, 40)) as pilot:
        screen = await open_gpus(app, pilot)
        no_gpu = gpu_views(3)["node2"]
        assert no_gpu.sample is not None
        app.apply_views(
            {"node2": replace(no_gpu, sample=replace(no_gpu.sample, gpus=(), gpu_error="x\ny"))}
        )
        await pilot.pause()
        for attention in (False, True):
            if screen.attention_only != attention:
                await pilot.press("a")
                await pilot.pause()
            for panel in screen.query(HostPanel):
                lines = panel.render().plain.split("\n")
                assert len(lines) == panel.content_lines(), (panel.host.name, attention)
                if panel.display:
                    assert panel.outer_size.height == len(lines) + 2, (panel.host.name, attention)
