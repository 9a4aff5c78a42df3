"""Enter on the launch form (issue 23 item 6): on the Kind select or the host list it
opens or chooses, as Textual's widgets do; a job starts only from Enter in a text field
or ctrl+r. A new user pressed `l`, then Enter to open the Kind list, and a job started.

The app has no cluster connection here, so a launch that starts ends at "Not launched:
not connected to the cluster yet." in the form's status line: that line is how these
tests see whether Enter asked for a launch (test_jobs_live.py launches for real)."""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot
from textual.widgets import Input, Select, SelectionList, Static
from ui_fixtures import FROZEN_NOW

from console.inventory import Host, Inventory
from console.ui.app import DistConsoleApp
from console.ui.screens.launch import LaunchScreen

INVENTORY = Inventory(
    path="/srv/hosts.yaml",
    hosts=tuple(Host(name=f"node{i}", address=f"10.0.0.{10 + i}", gpus=4) for i in range(4)),
)
ASKED_TO_LAUNCH = "Not launched: not connected to the cluster yet."


def make_app() -> DistConsoleApp:
    return DistConsoleApp(INVENTORY, connections_factory=None, clock=lambda: FROZEN_NOW)


async def open_form(app: DistConsoleApp, pilot: Pilot[Any]) -> LaunchScreen:
    await pilot.press("l")
    await pilot.pause()
    assert isinstance(app.screen, LaunchScreen)
    return app.screen


def status(screen: LaunchScreen) -> str:
    return str(screen.query_one("#launch-status", Static).render())


async def test_l_then_enter_opens_the_kind_list_and_starts_nothing() -> None:
    app = make_app()
    async with app.run_test(size=(160, 60)) as pilot:
        screen = await open_form(app, pilot)
        kind = screen.query_one("#kind", Select)
        assert screen.spec is not None  # a valid 16-rank DDP job, ready to go
        assert screen.spec.kind.value == "ddp"
        await pilot.press("enter")
        await pilot.pause()
        assert kind.expanded, "Enter on the form's first field opens the Kind list"
        assert app.screen is screen and status(screen) != ASKED_TO_LAUNCH
        # Down and Enter choose a kind in the list: still no launch.
        await pilot.press("down", "enter")
        await pilot.pause()
        assert not kind.expanded and kind.value == "mpi"
        assert app.focused is kind
        assert app.screen is screen and status(screen) != ASKED_TO_LAUNCH
        # Enter again opens it again (it never launches from here).
        await pilot.press("enter")
        await pilot.pause()
        assert kind.expanded and status(screen) != ASKED_TO_LAUNCH
        await pilot.press("escape")
        await pilot.pause()
        assert not kind.expanded and app.screen is screen


async def test_enter_on_the_host_list_ticks_a_host_and_starts_nothing() -> None:
    app = make_app()
    async with app.run_test(size=(160, 60)) as pilot:
        screen = await open_form(app, pilot)
        hosts = screen.query_one("#hosts", SelectionList)
        hosts.focus()
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert hosts.selected == ["node0"]
        assert app.screen is screen and status(screen) != ASKED_TO_LAUNCH


async def test_enter_in_a_text_field_and_ctrl_r_still_launch() -> None:
    app = make_app()
    async with app.run_test(size=(160, 60)) as pilot:
        screen = await open_form(app, pilot)
        program = screen.query_one("#program", Input)
        program.focus()
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert status(screen) == ASKED_TO_LAUNCH
        # ctrl+r from the Kind select (or anywhere) launches too.
        screen.query_one("#kind", Select).focus()
        screen.query_one("#launch-status", Static).update("")
        await pilot.pause()
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert status(screen) == ASKED_TO_LAUNCH
