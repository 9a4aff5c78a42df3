"""The last validation in the host detail ("Validated 2 h ago: warn (...)") and the launch
form's `--validate` box (kept in the draft like the pre-flight box). No hosts: the views
are fed to the app's store, the verdicts written by console.validate.store itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Checkbox, Static
from ui_fixtures import FROZEN_NOW

from console.inventory import Host, Inventory
from console.probe.models import GpuSample, HostSample, HostView
from console.transport.base import HostState, HostStatus
from console.ui.app import DistConsoleApp
from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.host_detail import HostDetailScreen
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
        assert app.screen.query_one("#validate", Checkbox).value is True
