"""SVG snapshot of the dense GPU view: 256 hosts x 8 GPUs on 200x50 (fixed views)."""

from __future__ import annotations

from typing import Any

from dense_fixtures import dense_inventory, dense_statuses, dense_views
from textual.pilot import Pilot
from ui_fixtures import FROZEN_NOW

from console.ui.app import DistConsoleApp


async def show_256_hosts(pilot: Pilot[Any]) -> None:
    app = pilot.app
    assert isinstance(app, DistConsoleApp)
    await pilot.press("g")
    await pilot.pause()
    app.apply_statuses(dense_statuses())
    for step in range(3):
        app.apply_views(dense_views(step))
    await pilot.pause()


def test_dense_view_256_hosts(snap_compare: Any) -> None:
    app = DistConsoleApp(dense_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)
    assert snap_compare(app, terminal_size=(200, 50), run_before=show_256_hosts)
