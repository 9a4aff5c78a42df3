"""The hosts table sizes its changing columns itself: the widest cell shown, never more.

DataTable's own ``update_width`` re-measured a whole column for every cell that got
narrower (quadratic in hosts); the table now keeps a count of widths per column.
"""

from __future__ import annotations

import time

from rich.cells import cell_len
from textual.app import App, ComposeResult
from textual.widgets.data_table import ColumnKey

from console.inventory import Host
from console.transport.base import HostState, HostStatus
from console.ui.widgets.host_table import HostTable

HOSTS = [Host(name=f"node{i}", address=f"10.0.0.{i}") for i in range(40)]


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield HostTable(HOSTS, clock=time.time, id="t")


def widest(table: HostTable, column: str) -> int:
    label = cell_len(table.columns[ColumnKey(column)].label.plain)
    return max(label, *(cell_len(table.text_of(h.name, column)) for h in HOSTS))


async def test_fitted_columns_follow_the_widest_cell_both_ways() -> None:
    app = TableApp()
    async with app.run_test(size=(160, 50)) as pilot:
        table = app.query_one(HostTable)
        state = table.columns[ColumnKey("state")]
        assert state.content_width == cell_len("connecting")

        # One host grows the column; everything else shrinks nothing.
        table.apply([HostStatus("node3", HostState.HOST_KEY_REJECTED, reason="changed key")])
        await pilot.pause()
        assert state.content_width == cell_len("host-key-rejected") == widest(table, "state")

        # Every host up: the column shrinks to what is left ("up", under the label).
        table.apply([HostStatus(h.name, HostState.UP, latency_ms=12.0) for h in HOSTS])
        await pilot.pause()
        assert state.content_width == widest(table, "state") == cell_len("State")
        latency = table.columns[ColumnKey("latency")]
        assert latency.content_width == widest(table, "latency") == cell_len("Latency")
        last_seen = table.columns[ColumnKey("last_seen")]
        assert last_seen.content_width == widest(table, "last_seen") == cell_len("Last seen")

        # A slow host widens latency again; going back shrinks it.
        table.apply([HostStatus("node7", HostState.UP, latency_ms=12345.0)])
        await pilot.pause()
        assert latency.content_width == widest(table, "latency") >= cell_len("12.3 s")
        table.apply([HostStatus("node7", HostState.UP, latency_ms=3.0)])
        await pilot.pause()
        assert latency.content_width == widest(table, "latency")
        assert table.state_of("node7") == "up"


async def test_ages_wait_while_another_screen_is_shown_and_catch_up_on_return() -> None:
    from console.inventory import Inventory
    from console.ui.app import DistConsoleApp
    from console.ui.screens.hosts import HostsScreen

    now = [1_000_000.0]
    inventory = Inventory(path="/srv/hosts.yaml", hosts=tuple(HOSTS[:3]))
    app = DistConsoleApp(inventory, connections_factory=None, clock=lambda: now[0])
    async with app.run_test(size=(160, 40)) as pilot:
        app.apply_statuses(
            [HostStatus("node1", HostState.DOWN, reason="refused", last_seen=now[0] - 5)]
        )
        await pilot.pause()
        table = app.query_one(HostTable)
        assert table.text_of("node1", "last_seen") == "5s ago"

        await pilot.press("g")
        now[0] += 120
        await pilot.pause(app.services.settings.refresh_s * 2)  # ticks pass unseen
        assert not isinstance(app.screen, HostsScreen)
        assert table.text_of("node1", "last_seen") == "5s ago"

        await pilot.press("h")
        await pilot.pause()
        assert isinstance(app.screen, HostsScreen)
        assert table.text_of("node1", "last_seen") == "2m ago"
