"""Issue 9's key defects, at 80x24 and 200x50: single-letter app keys do not fire from the
launch form's fields, the form keeps what was typed across Esc and `l`, and holding Down
in a table or list moves one row per press (none lost).

No hosts: the form's preview is the real planner; tables are fed through the app's store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from textual import events
from textual.pilot import Pilot
from textual.widgets import Checkbox, DataTable, Footer, Input, Select, SelectionList
from textual.widgets._footer import FooterKey
from ui_fixtures import FROZEN_NOW

from console.inventory import Host, Inventory
from console.jobs.models import JobState
from console.transport.base import HostState, HostStatus
from console.ui.app import DistConsoleApp
from console.ui.jobs_service import JobRow
from console.ui.screens.help import HelpScreen
from console.ui.screens.launch import LaunchScreen

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((200, 50), id="200x50")]
APP_LETTERS = ("g", "h", "j", "q", "l", "t")
MANY = 60  # rows: more than 50 presses can walk through


def inventory(hosts: int = 3) -> Inventory:
    return Inventory(
        path="/srv/hosts.yaml",
        hosts=tuple(
            Host(name=f"node{i:02d}", address=f"10.0.0.{10 + i}", gpus=4, tags=("a100",))
            for i in range(hosts)
        ),
    )


def make_app(hosts: int = 3) -> DistConsoleApp:
    return DistConsoleApp(inventory(hosts), connections_factory=None, clock=lambda: FROZEN_NOW)


async def open_form(app: DistConsoleApp, pilot: Pilot[Any]) -> LaunchScreen:
    await pilot.press("l")
    await pilot.pause()
    assert isinstance(app.screen, LaunchScreen)
    return app.screen


def footer_keys(app: DistConsoleApp) -> set[str]:
    return {key.key for key in app.screen.query_one(Footer).query(FooterKey)}


@pytest.mark.parametrize("size", SIZES)
async def test_typing_app_letters_in_the_program_field_types_them(size: tuple[int, int]) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        screen = await open_form(app, pilot)
        program = screen.query_one("#program", Input)
        # The form opens on Kind (Enter there opens its list: issue 23 item 6); Tab or a
        # click reaches the program field.
        assert app.focused is screen.query_one("#kind", Select)
        program.focus()
        await pilot.pause()
        program.value = ""
        await pilot.press(*"ghjqlt?", "full_stop", "p", "y")
        await pilot.pause()
        assert program.value == "ghjqlt?.py"
        assert app.screen is screen and app.is_running
        assert app.theme == "distconsole-dark"  # `t` did not cycle the theme
        # `?` is typed here, so f1 is the form's help key.
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert app.screen.keys[0].scope == "Everywhere"
        assert any(k.scope == "Launch form (l): this screen" for k in app.screen.keys)
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is screen and program.value == "ghjqlt?.py"


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("field", ["#kind", "#hosts", "#fail_fast", "#preflight"])
async def test_app_letters_do_nothing_on_the_forms_select_list_and_boxes(
    size: tuple[int, int], field: str
) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        screen = await open_form(app, pilot)
        screen.query_one(field).focus()
        await pilot.pause()
        # The footer does not offer them either while the form has the keys.
        assert not footer_keys(app) & set(APP_LETTERS)
        assert {"escape", "ctrl+r"} <= footer_keys(app)
        for letter in APP_LETTERS:
            await pilot.press(letter)
            await pilot.pause()
            assert app.screen is screen and app.is_running, letter
        assert app.theme == "distconsole-dark"
        assert screen.query_one("#kind", Select).value == "ddp"
        # Outside the form the letters work again.
        await pilot.press("escape", "g")
        await pilot.pause()
        assert app.screen is app.cluster_screen


@pytest.mark.parametrize("size", SIZES)
async def test_reopening_the_form_keeps_what_was_typed(size: tuple[int, int]) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        screen = await open_form(app, pilot)
        screen.query_one("#kind", Select).value = "ps"
        await pilot.pause()
        program = screen.query_one("#program", Input)
        assert program.value == "example:ps"  # the kind's example follows the kind
        program.focus()
        program.value = ""
        await pilot.press(*"train.py")
        args = screen.query_one("#args", Input)
        args.focus()
        await pilot.press(*"--lr 0.1")
        screen.query_one("#workers", Input).value = "2"
        hosts = screen.query_one("#hosts", SelectionList)
        hosts.focus()
        await pilot.press("down", "space")  # tick node01
        screen.query_one("#preflight", Checkbox).focus()
        await pilot.press("space")  # untick the pre-flight
        await pilot.pause()
        assert hosts.selected == ["node01"]
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, LaunchScreen)

        # Elsewhere and back: a new form, with the old values.
        await pilot.press("j", "l")
        await pilot.pause()
        again = app.screen
        assert isinstance(again, LaunchScreen) and again is not screen
        assert again.query_one("#kind", Select).value == "ps"
        assert again.query_one("#program", Input).value == "train.py"
        assert again.query_one("#args", Input).value == "--lr 0.1"
        assert again.query_one("#workers", Input).value == "2"
        assert again.query_one("#workers", Input).display  # a ps form shows its fields
        assert again.query_one("#hosts", SelectionList).selected == ["node01"]
        assert again.query_one("#preflight", Checkbox).value is False
        assert again.query_one("#fail_fast", Checkbox).value is True
        # The draft lives in the app's services, not in the closed screen.
        draft = app.services.launch_draft
        assert draft is not None and draft.fields["program"] == "train.py"


async def key_repeat(
    app: DistConsoleApp,
    pilot: Pilot[Any],
    presses: int,
    between: Callable[[int], None] | None = None,
) -> None:
    """A held key: every repeat is queued before the app handles the first one;
    ``between(i)`` runs after the i-th (live data arriving while the key is held)."""
    assert app._driver is not None
    for i in range(presses):
        app._driver.send_message(events.Key("down", None))
        if between is not None:
            between(i)
            await asyncio.sleep(0)
    await pilot.pause()
    await pilot.pause()


def job_rows(n: int) -> list[JobRow]:
    return [
        JobRow(
            f"job-{i:03d}",
            "ddp-example-ddp",
            "ddp",
            JobState.RUNNING if i % 2 else JobState.SUCCEEDED,
            FROZEN_NOW - 60 * i,
            None if i % 2 else FROZEN_NOW,
            ("node00",),
            4,
            "",
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("size", SIZES)
async def test_holding_down_in_the_hosts_table_loses_no_press(size: tuple[int, int]) -> None:
    app = make_app(hosts=MANY)
    async with app.run_test(size=size) as pilot:
        table = app.hosts_screen.table
        assert app.focused is table and table.cursor_row == 0
        await key_repeat(app, pilot, 50)
        assert table.cursor_row == 50
        assert table.selected_host == "node50"
        await pilot.press(*["up"] * 50)
        assert table.cursor_row == 0

        # Held while statuses stream in (latency every keepalive, hosts going down).
        def statuses_arrive(i: int) -> None:
            state = HostState.DOWN if i % 7 == 0 else HostState.UP
            app.apply_statuses(
                [HostStatus(f"node{j:02d}", state, latency_ms=1.0 + i) for j in range(MANY)]
            )

        await key_repeat(app, pilot, 50, between=statuses_arrive)
        assert table.cursor_row == 50
        assert table.text_of("node50", "latency") == "50 ms"


@pytest.mark.parametrize("size", SIZES)
async def test_holding_down_in_the_jobs_table_loses_no_press(size: tuple[int, int]) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        app.apply_job_rows(job_rows(MANY))
        await pilot.press("j")
        await pilot.pause()
        table = app.jobs_screen.query_one("#jobs-table", DataTable)
        assert app.focused is table and table.cursor_row == 0
        await key_repeat(app, pilot, 50)
        assert table.cursor_row == 50
        # A refresh of the rows (new job, changed state) keeps the cursor where it went.
        app.apply_job_rows([replace(job_rows(MANY)[7], state=JobState.FAILED, ended=FROZEN_NOW)])
        await pilot.pause()
        assert table.cursor_row == 50 and app.jobs_screen.selected_id == "job-050"
        await pilot.press(*["down"] * 5)
        assert table.cursor_row == 55


@pytest.mark.parametrize("size", SIZES)
async def test_holding_down_in_the_forms_host_list_loses_no_press(size: tuple[int, int]) -> None:
    app = make_app(hosts=MANY)
    async with app.run_test(size=size) as pilot:
        screen = await open_form(app, pilot)
        hosts = screen.query_one("#hosts", SelectionList)
        hosts.focus()
        await pilot.pause()
        start = hosts.highlighted or 0
        await key_repeat(app, pilot, 50)
        assert hosts.highlighted == start + 50
        assert app.screen is screen


@pytest.mark.parametrize("size", SIZES)
async def test_holding_down_on_the_gpu_screen_loses_no_press(size: tuple[int, int]) -> None:
    app = make_app(hosts=MANY)
    async with app.run_test(size=size) as pilot:
        await pilot.press("g")
        await pilot.pause()
        await pilot.press("v")  # 60 hosts open on the dense view: these are the panels
        await pilot.pause()
        first = app.focused
        assert first is not None and first.id == "panel-node00"
        await key_repeat(app, pilot, 50)
        assert app.focused is not None and app.focused.id == "panel-node50"
