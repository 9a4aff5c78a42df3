"""Regressions from a hands-on pass through every screen (fixed inventory, no connections).

Each test is one problem a new user hit in ``distconsole demo``; they run without hosts.
"""

from __future__ import annotations

from ui_fixtures import FROZEN_NOW, fixed_statuses, static_inventory

from console.ui.app import DistConsoleApp
from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.hosts import HostsScreen
from console.ui.screens.jobs import JobsScreen


def make_app() -> DistConsoleApp:
    return DistConsoleApp(static_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)


async def test_h_comes_back_to_the_hosts_from_every_other_screen() -> None:
    # `h` from the GPU or jobs screen used to raise UnknownModeError and end the app.
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        app.hosts_screen.apply_statuses(fixed_statuses())
        for away, screen_type in (("g", ClusterScreen), ("j", JobsScreen)):
            await pilot.press(away)
            await pilot.pause()
            assert isinstance(app.screen, screen_type)
            await pilot.press("h")
            await pilot.pause()
            assert app.screen is app.hosts_screen
            assert isinstance(app.screen, HostsScreen)
        assert app.is_running
