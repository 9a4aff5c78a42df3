"""Issue 9 at 80x24 and 200x50: the DDP form's total steps say they are split per rank
and show the share live; `?` lists this app's keys by screen and scrolls; the command
palette reaches stop, logs, filter, screenshot, theme and every screen.

No hosts: the form's preview is the real planner; the palette's commands run for real.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.command import CommandInput, CommandPalette
from textual.containers import VerticalScroll
from textual.pilot import Pilot
from textual.widgets import Input, Label, Static
from ui_fixtures import FROZEN_NOW, fixed_statuses, gpu_inventory

from console.jobs.models import JobState
from console.ui.app import DistConsoleApp
from console.ui.jobs_service import JobRow
from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.help import HelpScreen
from console.ui.screens.jobs import ConfirmStop, JobsScreen
from console.ui.screens.launch import LaunchScreen

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((200, 50), id="200x50")]


def make_app(tmp_path: Path | None = None) -> DistConsoleApp:
    # gpu_inventory: four hosts without a GPU count, so one rank per host in the plan.
    app = DistConsoleApp(gpu_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)
    if tmp_path is not None:
        app.services.screenshot_dir = tmp_path
    return app


def text(screen: Any, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


@pytest.mark.parametrize("size", SIZES)
async def test_total_steps_say_they_are_split_and_show_the_share_per_rank(
    size: tuple[int, int],
) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await pilot.press("l")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, LaunchScreen)
        label = str(screen.query_one("#label-total_steps", Label).render())
        assert "split per rank" in label
        assert "total ÷ number of ranks" in text(screen, "#hint-total_steps")
        box = screen.query_one("#total_steps", Input)
        box.focus()
        # Live, keystroke by keystroke: 4 hosts x 1 GPU = 4 ranks.
        await pilot.press("1", "0")
        assert "10 over 4 ranks: 2 steps per rank" in text(screen, "#hint-total_steps")
        assert "2 dropped by the division" in text(screen, "#hint-total_steps")
        await pilot.press("0", "0")
        hint = text(screen, "#hint-total_steps")
        assert "1000 over 4 ranks: 250 steps per rank" in hint and "dropped" not in hint
        # Fewer GPUs per host, more ranks: the share follows.
        screen.query_one("#gpus_per_host", Input).value = "2"
        await pilot.pause()
        assert "1000 over 8 ranks: 125 steps per rank" in text(screen, "#hint-total_steps")
        # The hint stays visible under the field at both sizes.
        hint_widget = screen.query_one("#hint-total_steps", Static)
        form = screen.query_one("#launch-form", VerticalScroll)
        form.scroll_to_widget(hint_widget, animate=False)
        await pilot.pause()
        assert hint_widget.region.height >= 1 and form.region.contains_region(hint_widget.region)


@pytest.mark.parametrize("size", SIZES)
async def test_help_lists_this_apps_keys_by_screen_and_scrolls(size: tuple[int, int]) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await pilot.press("j", "question_mark")
        await pilot.pause()
        help_ = app.screen
        assert isinstance(help_, HelpScreen)
        scopes = list(dict.fromkeys(k.scope for k in help_.keys))
        # Everywhere first, then the screen the help was opened on, then the others.
        assert scopes[0] == "Everywhere"
        assert scopes[1] == "Jobs screen (j): this screen"
        for screen in ("Hosts screen", "GPU screen", "Launch form", "Logs of a job", "Host detail"):
            assert any(scope.startswith(screen) for scope in scopes), screen
        shown = {(k.key, k.description) for k in help_.keys}
        for row in [("q", "Quit"), ("?/f1", "Help"), (":/^p", "Commands"), ("s", "Stop job")]:
            assert row in shown
        assert ("/", "Filter") in shown and ("^r", "Launch") in shown
        # Only this app's keys: none of what Textual's classes bring along.
        descriptions = {k.description for k in help_.keys}
        for builtin in ("Cursor down", "Cursor up", "Page down", "Focus Next", "Select", "Copy"):
            assert builtin not in descriptions
        assert not any(k.key in ("^q", "^c") for k in help_.keys)

        scroll = help_.query_one("#help-keys", VerticalScroll)
        assert app.focused is scroll
        last_group = help_.query(".help-group").last()
        if size == (80, 24):
            assert scroll.max_scroll_y > 0  # longer than the box: it must scroll
        await pilot.press("end")
        await pilot.pause()
        assert scroll.scroll_y == scroll.max_scroll_y
        assert scroll.region.contains_region(last_group.region)  # the last group is reachable
        await pilot.press("home")
        await pilot.pause()
        assert scroll.scroll_y == 0
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, JobsScreen)


async def run_command(pilot: Pilot[Any], app: DistConsoleApp, search: str) -> None:
    """Open the palette with `:`, type, run the first match (the user's path)."""
    await pilot.press("colon")
    await pilot.pause()
    assert isinstance(app.screen, CommandPalette)
    # As typed, at once: the palette searches once instead of once per key (a key at a
    # time, each command took ~2 s here).
    app.screen.query_one(CommandInput).value = search
    await pilot.pause(0.3)  # the palette searches in a worker
    await pilot.press("enter")
    await pilot.pause()
    await pilot.pause()


def commands(app: DistConsoleApp) -> set[str]:
    return {command.title for command in app.get_system_commands(app.screen)}


@pytest.mark.parametrize("size", SIZES)
async def test_the_palette_offers_every_action(size: tuple[int, int]) -> None:
    app = make_app()
    async with app.run_test(size=size):
        titles = commands(app)
        for title in (
            "Hosts",
            "GPUs",
            "Jobs",
            "Launch",
            "Stop the selected job",
            "Logs of the selected job",
            "Filter GPU hosts",
            "Attention view",
            "Reconnect the selected host",
            "Screenshot",
            "Next theme",
            "Theme: distconsole-light",
            "Help",
            "Reconnect all",
            "Quit",
        ):
            assert title in titles, title
        # Textual's own screenshot (silent, to a downloads folder) and its key panel are gone.
        assert sum(1 for t in titles if t == "Screenshot") == 1 and "Keys" not in titles


@pytest.mark.parametrize("size", SIZES)
async def test_screenshot_from_the_palette_is_saved_and_says_where(
    size: tuple[int, int], tmp_path: Path
) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=size) as pilot:
        app.apply_statuses(fixed_statuses())
        await run_command(pilot, app, "screenshot")
        await pilot.pause(0.2)
        saved = list(tmp_path.glob("*.svg"))
        assert len(saved) == 1, saved
        svg = saved[0].read_text()
        assert svg.startswith("<svg") and "node0" in svg
        assert "Search for commands" not in svg  # the screen, not the palette
        notes = [str(n.message) for n in app._notifications]
        assert any(str(saved[0]) in note for note in notes), notes
        # f2 does the same, from any screen.
        await pilot.press("g", "f2")
        await pilot.pause()
        second = set(tmp_path.glob("*.svg")) - set(saved)
        assert len(second) == 1, second
        assert "GPU" in next(iter(second)).read_text() or "node3" in next(iter(second)).read_text()


@pytest.mark.parametrize("size", SIZES)
async def test_palette_stop_logs_filter_theme_and_screens(size: tuple[int, int]) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        row = JobRow(
            "job-1", "ddp-train", "ddp", JobState.RUNNING, FROZEN_NOW - 9, None, ("node0",), 4, ""
        )
        app.apply_job_rows([row])
        await pilot.pause()

        await run_command(pilot, app, "stop the selected")
        assert isinstance(app.screen, ConfirmStop) and app.screen.row.id == "job-1"
        await pilot.press("n")
        await pilot.pause()
        assert isinstance(app.screen, JobsScreen)

        await pilot.press("h")
        await run_command(pilot, app, "logs of the selected")
        assert app.current_mode == "jobs"  # the logs open over the jobs screen
        # No cluster in this app: the logs path answers, naming why there is nothing.
        notes = [str(n.message) for n in app._notifications]
        assert any("no logs to follow" in note for note in notes), notes

        await run_command(pilot, app, "reconnect the selected")
        assert app.screen is app.hosts_screen
        notes = [str(n.message) for n in app._notifications]
        assert any("Not connected to any host" in note for note in notes), notes

        await run_command(pilot, app, "filter gpu")
        assert isinstance(app.screen, ClusterScreen)
        box = app.screen.query_one("#filter", Input)
        assert app.focused is box and box.has_class("-open")
        await pilot.press(*"rack2")
        await pilot.pause()
        assert app.screen.query_text == "rack2"
        await pilot.press("enter")

        await run_command(pilot, app, "attention view")
        assert isinstance(app.screen, ClusterScreen) and app.screen.attention_only
        await pilot.press("a")  # the screen's own key turns it off again
        assert not app.screen.attention_only

        await run_command(pilot, app, "theme: distconsole-light")
        assert app.theme == "distconsole-light"
        for search, expected in (("jobs", JobsScreen), ("gpus", ClusterScreen)):
            await run_command(pilot, app, search)
            assert isinstance(app.screen, expected), search
        await run_command(pilot, app, "launch")
        assert isinstance(app.screen, LaunchScreen)
        await pilot.press("escape")
        await run_command(pilot, app, "hosts")
        assert app.screen is app.hosts_screen
