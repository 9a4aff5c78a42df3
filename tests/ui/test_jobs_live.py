"""Launch from the form and stop from the jobs screen, over real sshd hosts with real
torchrun (the bundled DDP example on CPU, gloo)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from sshd_cluster import SshdCluster
from textual.pilot import Pilot
from textual.widgets import Input

from console import inventory as inventory_module
from console.jobs.models import JobState
from console.settings import make_settings
from console.ui.app import DistConsoleApp
from console.ui.screens.jobs import ConfirmStop, JobsScreen
from console.ui.screens.launch import LaunchScreen

pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.timeout(240)]


async def until(pilot: Pilot[Any], check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        await pilot.pause(0.2)
    raise AssertionError(f"not within {timeout}s: {what}")


def processes_of(user: str, job_id: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["username", "environ"]):
        try:
            env = proc.info["environ"] or {}
        except (psutil.AccessDenied, psutil.NoSuchProcess):
            continue
        if proc.info["username"] == user and env.get("DISTCONSOLE_JOB_ID") == job_id:
            found.append(proc)
    return found


async def test_launch_from_the_form_then_stop_from_the_jobs_screen(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISTCONSOLE_DATA_DIR", str(tmp_path / "data"))
    cluster = sshd_cluster(n=2)
    inventory = inventory_module.load(cluster.write_inventory(tmp_path / "hosts.yaml"))
    app = DistConsoleApp(inventory, settings=make_settings(monitor_interval_s=None))
    async with app.run_test(size=(160, 60)) as pilot:
        await until(pilot, lambda: app.jobs is not None, 30, "job control ready")
        names = [h.name for h in inventory.hosts]
        await until(
            pilot,
            lambda: all(app.hosts_screen.table.state_of(n) == "up" for n in names),
            30,
            "hosts up",
        )
        await pilot.press("l")
        await pilot.pause()
        form = app.screen
        assert isinstance(form, LaunchScreen)
        form.query_one("#gpus_per_host", Input).value = "1"
        form.query_one("#args", Input).value = "--steps 100000 --sleep 0.05"
        form.query_one("#name", Input).value = "ui-ddp"
        await pilot.pause()
        assert form.spec is not None, form.errors
        form.query_one("#name", Input).focus()
        await pilot.press("enter")  # Enter in a field launches (pre-flight included)
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), 120, "launched")
        screen = app.screen
        assert isinstance(screen, JobsScreen)
        await until(pilot, lambda: bool(screen.rows), 5, "a job row")
        (row,) = screen.rows.values()
        assert row.name == "ui-ddp" and row.kind == "ddp" and row.ranks == 2
        assert row.state in (JobState.RUNNING, JobState.STARTING)
        users = [h.user for h in cluster.hosts]
        await until(
            pilot,
            # torchrun and the rank it spawned, on each host
            lambda: all(len(processes_of(u, row.id)) >= 2 for u in users),
            90,
            "ranks running on both hosts",
        )

        await pilot.press("s")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmStop)
        await pilot.press("y")
        await until(
            pilot,
            lambda: screen.rows[row.id].state is JobState.STOPPED,
            60,
            "the row says stopped",
        )
        assert not any(processes_of(u, row.id) for u in users)
        await pilot.press("q")
