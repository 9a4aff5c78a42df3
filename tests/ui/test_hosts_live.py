"""The hosts screen over real OpenSSH sshd hosts: rows follow hosts going down and up."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sshd_cluster import SshdCluster
from textual.pilot import Pilot
from textual.widgets import Static

from console import inventory as inventory_module
from console.ui.app import DistConsoleApp

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(120)]


async def wait_for_rows(
    pilot: Pilot[Any], app: DistConsoleApp, expected: dict[str, str], timeout: float
) -> None:
    """Wait until the rows *on screen* show the expected states."""
    deadline = time.monotonic() + timeout
    shown: dict[str, str] = {}
    while time.monotonic() < deadline:
        shown = {name: app.hosts_screen.table.state_of(name) for name in expected}
        if shown == expected:
            return
        await pilot.pause(0.1)
    raise AssertionError(f"after {timeout}s the rows show {shown}, expected {expected}")


async def test_rows_follow_a_host_going_down_and_coming_back(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=2)
    inventory = inventory_module.load(
        cluster.write_inventory(tmp_path / "hosts.yaml", connect_timeout=3)
    )
    first, second = (h.name for h in cluster.hosts)
    app = DistConsoleApp(inventory)
    async with app.run_test(size=(140, 30)) as pilot:
        await wait_for_rows(pilot, app, {first: "up", second: "up"}, timeout=20)
        latency = app.hosts_screen.table.text_of(first, "latency")
        assert latency.endswith(("ms", " s"))

        cluster.stop(second)
        await wait_for_rows(pilot, app, {first: "up", second: "down"}, timeout=15)
        assert app.hosts_screen.table.statuses[second].reason
        summary = str(app.hosts_screen.query_one("#hosts-summary", Static).render())
        assert "1 up" in summary and "1 down" in summary

        cluster.start(second)
        # Back by itself: the pool reconnects with backoff (capped at 30 s).
        await wait_for_rows(pilot, app, {first: "up", second: "up"}, timeout=45)
        await pilot.press("q")
    assert app.return_code == 0
