"""Issue 30 (4): the demo's own job is not announced as "re-attached". ``distconsole demo``
launches its job (``demo_job.start_training``, as ``launch --detach`` does) and opens the
console with that job's id (``run(started=...)``); a console that finds a job someone
else started still says it re-attached to it. The demo cluster in process (real SSH
servers, real job processes)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from console import inventory as inventory_module
from console.commands.parts.demo_job import start_training
from console.settings import make_settings
from console.transport.demo import DemoCluster
from console.ui.app import DistConsoleApp

pytestmark = pytest.mark.timeout(240)


async def until(pilot: Pilot[Any], check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        await pilot.pause(0.3)
    raise AssertionError(f"not within {timeout}s: {what}")


def said(app: DistConsoleApp) -> list[str]:
    return [n.message for n in app._notifications]


async def test_the_demos_own_job_is_not_re_attached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISTCONSOLE_DATA_DIR", str(tmp_path / "data"))
    async with DemoCluster(1) as cluster:
        notice, job_id = await start_training(cluster.inventory_path)
        assert job_id is not None, notice
        inventory = inventory_module.load(cluster.inventory_path)
        for started, expected in (((job_id,), None), ((), "Re-attached to 1 running job")):
            await open_console(inventory, job_id, started, expected)


async def open_console(
    inventory: inventory_module.Inventory,
    job_id: str,
    started: tuple[str, ...],
    expected: str | None,
) -> None:
    app = DistConsoleApp(inventory, settings=make_settings(monitor_interval_s=None))
    app.services.started_here = started
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: attached(app, job_id), 90, "the job is attached")
        if expected is None:
            await pilot.pause(1.0)
            assert re_attached(app) == [], said(app)
            return
        await until(pilot, lambda: bool(re_attached(app)), 10, "the notice")
        assert re_attached(app) == [f"{expected} started earlier"], said(app)
        assert app.jobs is not None
        await app.jobs.stop(job_id)


def attached(app: DistConsoleApp, job_id: str) -> bool:
    return app.jobs is not None and job_id in app.jobs.runner.jobs


def re_attached(app: DistConsoleApp) -> list[str]:
    return [m for m in said(app) if m.startswith("Re-attached")]
