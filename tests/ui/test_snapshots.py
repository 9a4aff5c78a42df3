"""Snapshots of the hosts screen in both bundled themes (pytest-textual-snapshot).

Deterministic: fixed host states are fed into the screen's update method right after
mount (no connections), and "now" is frozen so relative times render the same.
Update after an intended change with ``pytest tests/ui --snapshot-update``.
"""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot
from ui_fixtures import FROZEN_NOW, fixed_statuses, gpu_inventory, gpu_views, static_inventory

from console.ui.app import DistConsoleApp

SIZE = (120, 24)


async def feed_fixed_statuses(pilot: Pilot[Any]) -> None:
    app = pilot.app
    assert isinstance(app, DistConsoleApp)
    app.apply_statuses(fixed_statuses())
    await pilot.pause()


@pytest.mark.parametrize("theme", ["distconsole-dark", "distconsole-light"])
def test_hosts_screen(snap_compare: Any, theme: str) -> None:
    app = DistConsoleApp(
        static_inventory(), theme=theme, connections_factory=None, clock=lambda: FROZEN_NOW
    )
    assert snap_compare(app, terminal_size=SIZE, run_before=feed_fixed_statuses)


def test_hosts_screen_with_insecure_host_keys_banner(snap_compare: Any) -> None:
    app = DistConsoleApp(
        static_inventory(insecure=True), connections_factory=None, clock=lambda: FROZEN_NOW
    )
    assert snap_compare(app, terminal_size=SIZE, run_before=feed_fixed_statuses)


def test_help_screen(snap_compare: Any) -> None:
    app = DistConsoleApp(static_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)
    assert snap_compare(
        app, terminal_size=(120, 40), run_before=feed_fixed_statuses, press=["question_mark"]
    )


async def show_fixed_gpus(pilot: Pilot[Any]) -> None:
    app = pilot.app
    assert isinstance(app, DistConsoleApp)
    await pilot.press("g")
    await pilot.pause()
    for step in range(8):  # eight samples of history for the sparklines
        app.apply_views(gpu_views(step))
    await pilot.pause()


@pytest.mark.parametrize("theme", ["distconsole-dark", "distconsole-light"])
def test_cluster_screen(snap_compare: Any, theme: str) -> None:
    app = DistConsoleApp(
        gpu_inventory(), theme=theme, connections_factory=None, clock=lambda: FROZEN_NOW
    )
    assert snap_compare(app, terminal_size=(130, 40), run_before=show_fixed_gpus)


def test_cluster_screen_attention_view(snap_compare: Any) -> None:
    app = DistConsoleApp(gpu_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)
    assert snap_compare(app, terminal_size=(130, 30), run_before=show_fixed_gpus, press=["a"])
