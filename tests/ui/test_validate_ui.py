"""The last validation in the host detail ("Validated 2 h ago: warn (...)"), the launch
form's `--validate` box (kept in the draft like the pre-flight box), and the hosts
screen's `v`/`V`. Mostly no hosts: the views are fed to the app's store, the verdicts
written by console.validate.store itself; one test validates a demo host for real."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import Checkbox, Static
from ui_fixtures import FROZEN_NOW

from console import inventory as inventory_module
from console.inventory import Host, Inventory
from console.jobs.service import ValidationProgress, ValidationVerdict, ValidationWarning
from console.probe.models import GpuSample, HostSample, HostView
from console.settings import make_settings
from console.transport.base import HostState, HostStatus
from console.transport.demo import DemoCluster
from console.ui.app import DistConsoleApp
from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.help import HelpScreen
from console.ui.screens.host_detail import HostDetailScreen
from console.ui.screens.hosts import HostsScreen, validation_notice
from console.ui.screens.launch import LaunchScreen
from console.ui.widgets.gpu_panel import HostPanel
from console.validate import store
from console.validate.verdicts import Row

NAMES = ("node1", "node2")
QUOTA = "CPU limited by a cgroup quota to 0.25 CPU (cpu.max)"


def inventory(tmp_path: Path) -> Inventory:
    hosts = tuple(Host(name=n, address=f"10.0.1.{i}", gpus=1) for i, n in enumerate(NAMES))
    return Inventory(path=str(tmp_path / "hosts.yaml"), hosts=hosts)


def make_app(tmp_path: Path) -> DistConsoleApp:
    return DistConsoleApp(inventory(tmp_path), connections_factory=None, clock=lambda: FROZEN_NOW)


def views() -> dict[str, HostView]:
    gpu = (GpuSample(0, name="NVIDIA H100", utilization_gpu=10, temperature_c=40),)
    return {
        n: HostView(
            n, HostState.UP, "", HostSample(n, FROZEN_NOW, "nvidia-smi", gpu), False, FROZEN_NOW
        )
        for n in NAMES
    }


async def open_detail(app: DistConsoleApp, pilot: Pilot[Any], name: str) -> HostDetailScreen:
    await pilot.press("g")
    await pilot.pause()
    app.apply_statuses([HostStatus(n, HostState.UP, since=FROZEN_NOW) for n in NAMES])
    app.apply_views(views())
    await pilot.pause()
    assert isinstance(app.screen, ClusterScreen)
    next(p for p in app.screen.query(HostPanel) if p.host.name == name).focus()
    await pilot.press("enter")
    await pilot.pause()
    assert isinstance(app.screen, HostDetailScreen)
    return app.screen


def header(detail: HostDetailScreen) -> list[str]:
    return str(detail.query_one("#detail-host", Static).render()).splitlines()


async def test_host_detail_shows_the_last_validation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISTCONSOLE_DATA_DIR", str(tmp_path))
    path = str(tmp_path / "hosts.yaml")
    store.save(path, [Row("node1", None, "warn", (QUOTA,))], now=FROZEN_NOW - 2 * 3600)
    app = make_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        detail = await open_detail(app, pilot, "node1")
        assert f"Validated 2 h ago: warn ({QUOTA})" in header(detail)
        # A run that just ended: the screen reads the store again.
        store.save(path, [Row("node1", None, "ok", ())], now=FROZEN_NOW - 60)
        detail.reread_validation()
        await pilot.pause()
        assert "Validated 60 s ago: ok" in header(detail)
        await pilot.press("escape")
        await pilot.pause()
        # Never validated: no line (health and `validate` say how).
        other = await open_detail(app, pilot, "node2")
        assert not [ln for ln in header(other) if ln.startswith("Validated")]


async def test_the_launch_forms_validate_box_is_off_and_kept_in_the_draft(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISTCONSOLE_DATA_DIR", str(tmp_path))
    app = make_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.press("l")
        await pilot.pause()
        assert isinstance(app.screen, LaunchScreen)
        box = app.screen.query_one("#validate", Checkbox)
        assert box.value is False
        box.focus()
        await pilot.press("space")
        await pilot.press("escape")
        await pilot.pause()
        assert app.services.launch_draft is not None and app.services.launch_draft.validate
        await pilot.press("l")
        await pilot.pause()
        assert isinstance(app.screen, LaunchScreen)
        form = app.screen
        assert form.query_one("#validate", Checkbox).value is True
        # The service's events while it validates: progress on the status line, a warn
        # as a note (the launch goes on).
        form._validation_event(ValidationProgress("node1: compute"))
        form._validation_event(ValidationWarning("node2: warn: slow"))
        await pilot.pause()
        status = str(form.query_one("#launch-status", Static).render())
        assert status == "Launching: validate node1: compute"
        assert "validate: node2: warn: slow" in [n.message for n in app._notifications]


def test_the_notice_counts_and_names_what_is_not_ok() -> None:
    rows = [Row(f"n{i}", None, "ok", ()) for i in range(3)] + [Row("n3", None, "warn", ("x",))]
    lines = tuple(f"n{i}: warn: slow" for i in range(5))
    said = validation_notice("8 hosts", rows, ValidationVerdict("warn", lines)).splitlines()
    assert said[0] == "Validated 8 hosts: warn (1 warn, 3 ok)"
    assert said[1:4] == list(lines[:3])
    assert said[4] == "and 2 more: `distconsole health` lists them"


async def test_v_and_shift_v_are_in_help_and_the_palette_and_say_why_nothing_runs(
    tmp_path: Path,
) -> None:
    app = make_app(tmp_path)  # no connections: nothing to validate with
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.press("h")
        await pilot.pause()
        assert isinstance(app.screen, HostsScreen)
        # Off the footer (full at 120 columns): `?` and the palette list them.
        bound = {b.key: b.description for b in app.screen.BINDINGS if not isinstance(b, tuple)}
        assert bound["v"] == "Validate" and bound["V"] == "Validate all"
        titles = [c.title for c in app.get_system_commands(cast(Screen[object], app.screen))]
        assert "Validate all hosts" in titles
        await pilot.press("v")
        await pilot.pause()
        assert [n.message for n in app._notifications] == ["Not connected to any host in this view"]
        assert not app.screen.validating
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        here = [k for k in app.screen.keys if k.scope.startswith("Hosts")]
        assert {(k.key, k.description) for k in here} >= {("v", "Validate"), ("V", "Validate all")}


async def until(pilot: Pilot[Any], check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        await pilot.pause(0.3)
    raise AssertionError(f"not within {timeout}s: {what}")


@pytest.mark.slow
async def test_v_validates_a_demo_host_and_the_open_detail_shows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISTCONSOLE_DATA_DIR", str(tmp_path))
    async with DemoCluster(1) as cluster:
        inventory = inventory_module.load(cluster.inventory_path)
        app = DistConsoleApp(inventory, settings=make_settings(monitor_interval_s=None))
        async with app.run_test(size=(160, 50)) as pilot:
            statuses = app.services.store.statuses
            await until(pilot, lambda: "node0" in statuses and statuses["node0"].is_up, 60, "up")
            await pilot.press("h")
            await pilot.pause()
            hosts = app.screen
            assert isinstance(hosts, HostsScreen)
            await pilot.press("v")
            await pilot.pause()
            assert hosts.validating
            await pilot.press("enter")  # the detail, open while it runs, is told at the end
            await pilot.pause()
            detail = app.screen
            assert isinstance(detail, HostDetailScreen)
            await until(pilot, lambda: not hosts.validating, 240, "the validation's end")
            messages = [n.message for n in app._notifications]
            assert any(m.startswith("Validated node0: ok (1 ok)") for m in messages), messages
            assert hosts.sub_title is None  # the progress line is gone
            line = [ln for ln in header(detail) if ln.startswith("Validated ")]
            assert line and line[0].endswith("ago: ok"), header(detail)
