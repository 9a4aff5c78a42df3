"""Snapshots of what issue 9 changed: the help at a newcomer's 80x24 (grouped by screen,
scrolling inside its box) and the launch form at 80x24 and 200x50 (total steps split
per rank, shown under the field). Fixed inventory, frozen clock, a fixed job id.

Update after an intended change with ``pytest tests/ui/test_newcomer_snapshots.py
--snapshot-update``.
"""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input
from ui_fixtures import FROZEN_NOW, fixed_statuses, gpu_inventory, static_inventory

from console.ui.app import DistConsoleApp
from console.ui.screens.launch import LaunchScreen

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((200, 50), id="200x50")]


async def hosts_then_help(pilot: Pilot[Any]) -> None:
    app = pilot.app
    assert isinstance(app, DistConsoleApp)
    app.apply_statuses(fixed_statuses())
    await pilot.pause()


def test_help_by_screen_at_80x24(snap_compare: Any) -> None:
    # Its top only: the groups below belong to screens that other changes rework.
    app = DistConsoleApp(static_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)
    assert snap_compare(
        app, terminal_size=(80, 24), run_before=hosts_then_help, press=["question_mark"]
    )


async def form_with_total_steps(pilot: Pilot[Any]) -> None:
    app = pilot.app
    assert isinstance(app, DistConsoleApp)
    await pilot.press("l")
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, LaunchScreen)
    # The preview names the job's id: a fixed one instead of the clock's.
    screen._job_ids["ddp-example-ddp"] = "ddp-example-ddp-20231114-221320-0000"
    box = screen.query_one("#total_steps", Input)
    box.cursor_blink = False  # a blink caught mid-way differs by the cursor's cell
    box.focus()
    await pilot.press(*"1002")
    label = screen.query_one("#label-total_steps")
    screen.query_one("#launch-form").scroll_to_widget(label, animate=False, top=True)
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES)
def test_launch_form_total_steps_per_rank(snap_compare: Any, size: tuple[int, int]) -> None:
    app = DistConsoleApp(gpu_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)
    assert snap_compare(app, terminal_size=size, run_before=form_with_total_steps)
