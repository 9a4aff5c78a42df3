"""The hosts screen's footer shows `v` (validate the selected host), whole, at 80x24 and
at 120 columns: it was bound but left off the footer, where a newcomer looks for it.
Pilot on the real app; the footer's painted line is read as a terminal shows it."""

from __future__ import annotations

import pytest

from console.inventory import Host, Inventory
from console.ui.app import DistConsoleApp
from console.ui.screens.hosts import HostsScreen

INVENTORY = Inventory(
    path="/srv/hosts.yaml",
    hosts=tuple(Host(name=f"node{i}", address=f"10.0.0.{i}") for i in range(3)),
)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_the_hosts_footer_shows_validate_and_cuts_no_key(size: tuple[int, int]) -> None:
    app = DistConsoleApp(INVENTORY, connections_factory=None)
    async with app.run_test(size=size) as pilot:
        await pilot.press("h")
        await pilot.pause()
        assert isinstance(app.screen, HostsScreen)
        footer = app.screen._compositor.render_strips()[-1].text.rstrip()
        assert "v Validate" in footer, footer
        assert footer.endswith("? Help : Commands" if size[0] < 120 else "t Theme"), footer
