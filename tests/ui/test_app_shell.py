"""The app shell with Pilot: help, quit, palette, themes, footer, banner, batched rows.

These tests show a fixed inventory without connecting (``connections_factory=None``);
live host states over real sshd are in test_hosts_live.py.
"""

from __future__ import annotations

from rich.text import Text
from textual.command import CommandPalette
from textual.widgets import Footer, Static
from textual.widgets._footer import FooterKey
from ui_fixtures import FROZEN_NOW, fixed_statuses, static_inventory

from console.transport.base import HostState, HostStatus
from console.ui.app import DistConsoleApp
from console.ui.screens.help import HelpScreen
from console.ui.screens.hosts import HostsScreen
from console.ui.theming import bundled_themes


def make_app(*, insecure: bool = False, theme: str | None = None) -> DistConsoleApp:
    return DistConsoleApp(
        static_inventory(insecure=insecure),
        theme=theme,
        connections_factory=None,
        clock=lambda: FROZEN_NOW,
    )


async def test_help_lists_every_app_key_and_closes_with_escape() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        shown = {(k.key, k.description) for k in app.screen.keys}
        for key, does in [
            ("q", "Quit"),
            ("?/f1", "Help"),
            (":/^p", "Commands"),
            ("h", "Hosts"),
            ("t", "Theme"),
            ("↑/↓", "previous/next row, host or option (hold to move fast)"),
        ]:
            assert (key, does) in shown
        # The app's keys come first; the table's own ("Cursor down"...) are not listed.
        descriptions = [k.description for k in app.screen.keys]
        assert descriptions.index("Quit") == 0 and "Cursor down" not in descriptions
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, HostsScreen)


async def test_q_quits() -> None:
    app = make_app()
    async with app.run_test() as pilot:
        await pilot.press("q")
        await pilot.pause()
        assert app._exit  # the app is shutting down
    assert app.return_code == 0


async def test_footer_shows_every_app_binding() -> None:
    app = make_app()
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.pause()
        footer = app.screen.query_one(Footer)
        keys = {k.key for k in footer.query(FooterKey)}
        assert {"q", "question_mark", "colon", "h", "t"} <= keys
        assert footer.show_command_palette


async def test_colon_opens_palette_and_theme_switches_from_it() -> None:
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        app.apply_statuses(fixed_statuses())
        await pilot.pause()
        dark_colour = app.hosts_screen.table.get_cell("node2", "state")
        assert app.theme == "distconsole-dark"
        await pilot.press("colon")
        await pilot.pause()
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"theme: distconsole-light")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause()
        assert app.theme == "distconsole-light"
        assert isinstance(app.screen, HostsScreen)
        light_colour = app.hosts_screen.table.get_cell("node2", "state")
        assert isinstance(dark_colour, Text) and isinstance(light_colour, Text)
        assert light_colour.plain == "down"
        # The state colour follows the theme's state-down variable.
        light = next(t for t in bundled_themes() if t.name == "distconsole-light")
        assert light.variables["state-down"] in str(light_colour.style)
        assert str(dark_colour.style) != str(light_colour.style)


async def test_t_cycles_through_the_bundled_themes() -> None:
    app = make_app(theme="distconsole-light")
    async with app.run_test() as pilot:
        assert app.theme == "distconsole-light"
        await pilot.press("t")
        await pilot.pause()
        assert app.theme == "distconsole-dark"
        await pilot.press("t")
        await pilot.pause()
        assert app.theme == "distconsole-light"


async def test_palette_has_a_command_for_every_action() -> None:
    app = make_app()
    async with app.run_test():
        titles = {c.title for c in app.get_system_commands(app.screen)}
    assert {"Hosts", "Help", "Next theme", "Quit", "Theme"} <= titles
    assert {f"Theme: {t.name}" for t in bundled_themes()} <= titles


async def test_insecure_inventory_shows_a_warning_banner() -> None:
    secure, insecure = make_app(), make_app(insecure=True)
    async with secure.run_test():
        assert not secure.screen.query("#insecure-banner")
    async with insecure.run_test():
        banner = insecure.screen.query_one("#insecure-banner", Static)
        text = str(banner.render())
        assert "node3" in text and "NOT verified" in text and "node0" not in text


async def test_rows_take_the_latest_status_of_a_batch_and_ages_follow_the_clock() -> None:
    now = [FROZEN_NOW]
    app = DistConsoleApp(static_inventory(), connections_factory=None, clock=lambda: now[0])
    async with app.run_test(size=(140, 30)) as pilot:
        screen = app.hosts_screen
        assert [screen.table.state_of(h.name) for h in app.inventory.hosts] == ["connecting"] * 6
        app.apply_statuses(
            [
                HostStatus("node0", HostState.UP, latency_ms=3.0, since=now[0], last_seen=now[0]),
                HostStatus("node0", HostState.DOWN, reason="reset", since=now[0], last_seen=now[0]),
            ]
        )
        await pilot.pause()
        assert screen.table.state_of("node0") == "down"
        assert screen.table.text_of("node0", "reason") == "reset"
        assert "1 down" in str(screen.query_one("#hosts-summary", Static).render())
        now[0] += 125
        screen.table.refresh_ages()
        assert screen.table.text_of("node0", "last_seen") == "2m ago"
        # Brackets in a reason are text, not markup.
        app.apply_statuses(
            [HostStatus("node1", HostState.DOWN, reason="[Errno 111] Connection refused")]
        )
        assert screen.table.text_of("node1", "reason") == "[Errno 111] Connection refused"
        # Unknown hosts (not in this inventory) are ignored, not a crash.
        app.apply_statuses([HostStatus("stranger", HostState.UP)])
        assert "stranger" not in screen.table.statuses and "stranger" not in app.store.statuses
