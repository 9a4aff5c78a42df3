"""The forward key on real sshd hosts: `f` on the hosts screen opens the dialog with the
selected host filled in; a forward opened there reaches an HTTP server on node1, shows
on the hosts and jobs screens while it lives, ends with Delete, and closes with the
console. A Ray job's plan suggests its dashboard."""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sshd_cluster import SshdCluster
from textual.pilot import Pilot
from textual.widgets import Input, OptionList, Static

from console import inventory as inventory_module
from console.inventory import Host, Inventory
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.settings import make_settings
from console.ui.app import DistConsoleApp
from console.ui.screens.forward import ForwardScreen, job_suggestion, parse_request
from console.ui.screens.hosts import HostsScreen
from console.ui.screens.jobs import JobsScreen

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(120)]


async def until(pilot: Pilot[Any], check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        await pilot.pause(0.2)
    raise AssertionError(f"not within {timeout}s: {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return str(answer.read().decode())


def test_job_suggestion_and_request_parsing() -> None:
    inv = Inventory(
        path="hosts.yaml",
        hosts=tuple(Host(name=f"n{i}", address=f"10.0.0.{i + 1}") for i in range(2)),
    )
    ray = plan(make_spec(kind="ray", program="example:ray", master_port=4000), inv)
    assert job_suggestion(ray) == "n0:4001 4001"
    ddp = plan(make_spec(kind="ddp", program="example:ddp", master_port=4000), inv)
    assert job_suggestion(ddp) == "n0:"
    assert parse_request("n1:6006") == ("n1", "localhost", 6006, 0)
    assert parse_request("n1:10.1.1.1:6006 7000") == ("n1", "10.1.1.1", 6006, 7000)
    for bad in ("", "n1:6006 x", "n1 6006 7000 1"):
        with pytest.raises(ValueError):
            parse_request(bad)


async def test_forward_key_on_the_hosts_screen(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISTCONSOLE_DATA_DIR", str(tmp_path / "data"))
    cluster = sshd_cluster(n=2)
    inventory = inventory_module.load(cluster.write_inventory(tmp_path / "hosts.yaml"))
    app = DistConsoleApp(inventory, settings=make_settings(monitor_interval_s=None))
    remote = free_port()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("h")
        hosts = app.screen
        assert isinstance(hosts, HostsScreen)
        await until(
            pilot,
            lambda: all(hosts.table.state_of(h.name) == "up" for h in inventory.hosts),
            30,
            "hosts up",
        )
        assert app.connections is not None
        server = await app.connections["node1"].start(
            f'cd "$(mktemp -d)" && echo node1 > who.txt && '
            f"exec python3 -m http.server {remote} --bind 127.0.0.1"
        )
        hosts.table.move_cursor(row=1)
        assert hosts.table.selected_host == "node1"
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, ForwardScreen), 5, "forward dialog")
        dialog = app.screen
        assert isinstance(dialog, ForwardScreen)
        box = dialog.query_one("#forward-input", Input)
        assert box.value == "node1:"
        # Typed after the suggestion, not over it (issue 30: it was selected).
        assert box.selection.is_empty and box.cursor_position == len("node1:")
        await pilot.press(*str(remote))
        assert box.value == f"node1:{remote}"
        await pilot.press("enter")
        forwards = app.services.forwards
        assert forwards is not None
        await until(pilot, lambda: bool(forwards.live()), 15, "the forward opens")
        local = forwards.live()[0].local_port
        deadline = time.monotonic() + 20
        while True:  # the server on node1 may still be starting
            try:
                body = await asyncio.to_thread(fetch, f"http://127.0.0.1:{local}/who.txt")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                await pilot.pause(0.3)
        assert body.strip() == "node1"
        listed = dialog.query_one("#forward-list", OptionList)
        assert f"127.0.0.1:{local} -> node1 localhost:{remote}" in str(
            listed.get_option_at_index(0).prompt
        )
        await pilot.press("escape")
        line = hosts.query_one("#forwards", Static)
        assert line.display and f"127.0.0.1:{local}" in str(line.render())
        # The jobs screen shows it too (its tick); then Delete in the dialog ends it.
        await pilot.press("j")
        jobs = app.screen
        assert isinstance(jobs, JobsScreen)
        await until(
            pilot, lambda: jobs.query_one("#forwards", Static).display, 5, "jobs screen line"
        )
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, ForwardScreen), 5, "dialog again")
        await pilot.press("tab")  # from the input to the list (Delete there ends one)
        listed = app.screen.query_one("#forward-list", OptionList)
        assert listed.has_focus
        listed.highlighted = 0
        await pilot.press("delete")
        await until(pilot, lambda: not forwards.live(), 5, "the forward ends")
        await pilot.press("escape")
        assert not jobs.query_one("#forwards", Static).display
        # Another one, left open: quitting the console closes it.
        again = await forwards.open("node1", remote)
        server.close()
    with pytest.raises(OSError):
        await asyncio.to_thread(fetch, f"http://127.0.0.1:{again.local_port}/who.txt")
