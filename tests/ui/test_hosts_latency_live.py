"""The hosts screen's Latency column follows the connection, at 80x24 and 200x50: real
OpenSSH sshd, the transport re-measuring every keepalive interval, the app reading the
figures each refresh into its store, the row's cell. A host that stalls shows a slow
figure, then a quick one again."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sshd_cluster import SshdCluster
from textual.pilot import Pilot

from console import display
from console import inventory as inventory_module
from console.settings import make_settings
from console.ui.app import DistConsoleApp

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(120)]
SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((200, 50), id="200x50")]


def milliseconds(cell: str) -> float:
    number, unit = cell.split()
    return float(number) * (1000 if unit == "s" else 1)


async def wait_for_cell(
    pilot: Pilot[Any], app: DistConsoleApp, host: str, check: Callable[[float], bool], what: str
) -> list[str]:
    """Every Latency text the row showed until ``check`` holds for one of them."""
    shown: list[str] = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        cell = app.hosts_screen.table.text_of(host, "latency")
        if cell.endswith("ms") or cell.endswith(" s"):
            if not shown or shown[-1] != cell:
                shown.append(cell)
            if check(milliseconds(cell)):
                return shown
        await pilot.pause(0.05)
    raise AssertionError(f"{what}: the Latency cell showed {shown}")


@pytest.mark.parametrize("size", SIZES)
async def test_latency_column_updates_as_the_connection_changes(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path, size: tuple[int, int]
) -> None:
    cluster = sshd_cluster(n=1)
    path = cluster.write_inventory(tmp_path / "hosts.yaml", keepalive_interval=0.5)
    inventory = inventory_module.load(path)
    host = inventory.hosts[0].name
    # The app reads the transport's latest figure every refresh_s; a stall's slow figure
    # lasts one keepalive interval (0.5 s) before a quick one replaces it, so the app
    # must read more often than that or the stall can fall between two reads (seen in
    # a full-suite run: the default 1 s refresh missed it).
    app = DistConsoleApp(inventory, settings=make_settings(refresh_s=0.1))
    async with app.run_test(size=size) as pilot:
        await wait_for_cell(pilot, app, host, lambda ms: ms > 0, "no figure after connecting")
        at_connect = app.store.statuses[host].latency_ms
        assert at_connect is not None
        # Keepalive round trips replace the connect time (key exchange, auth: slower).
        await wait_for_cell(pilot, app, host, lambda ms: ms < at_connect, "never re-measured")

        cluster.freeze(host)  # sshd stopped: a keepalive waits for it
        await pilot.pause(0.8)
        cluster.thaw(host)
        await wait_for_cell(pilot, app, host, lambda ms: ms >= 200, "the stall never showed")
        await wait_for_cell(pilot, app, host, lambda ms: ms < 100, "stayed slow after the stall")
        assert app.hosts_screen.table.state_of(host) == "up"
        # The cell is the store's latest figure, formatted as everywhere else.
        status = app.store.statuses[host]
        assert app.hosts_screen.table.text_of(host, "latency") == display.latency(status.latency_ms)
        # At 80 columns too the column is on screen, not cut off to the right.
        table = app.hosts_screen.table
        latency_x = sum(c.get_render_width(table) for c in list(table.columns.values())[:3])
        assert latency_x + 8 <= table.size.width
        await pilot.press("q")
