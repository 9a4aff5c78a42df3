"""How often the console scans the hosts for jobs: once every host has its first GPU
sample (or shortly after start), then rarely, until the jobs screen is shown (a scan at
once, then often), and rarely again once it is left.

``discover`` is counted by a subclass: its real work (a program on every host) is tested
in tests/integration/test_jobs_discover_report.py."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from console.inventory import Host, Inventory
from console.jobs.history import JobHistory
from console.transport.pool import ClusterConnections
from console.ui import jobs_service
from console.ui.jobs_service import JobsService

INVENTORY = Inventory(path="/srv/hosts.yaml", hosts=(Host(name="n0", address="10.0.0.1"),))


class CountingJobs(JobsService):
    sweeps = 0

    async def discover(self) -> list[str]:
        self.sweeps += 1
        return []


async def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    async def poll() -> None:
        while not check():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), timeout)


@contextlib.asynccontextmanager
async def feeding(tmp_path: Path, **options: Any) -> AsyncIterator[CountingJobs]:
    """A counting service whose rows are being followed (which starts its sweeps)."""
    jobs = CountingJobs(
        ClusterConnections(INVENTORY),
        INVENTORY,
        history=JobHistory(tmp_path / "j.sqlite3"),
        **options,
    )
    feed = asyncio.ensure_future(jobs.row_updates().__anext__())
    try:
        yield jobs
    finally:
        feed.cancel()
        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
            await feed
        await jobs.close()


async def test_scans_follow_the_jobs_screen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs_service, "DISCOVER_START_S", 0.2)
    monkeypatch.setattr(jobs_service, "DISCOVER_EVERY_S", 0.05)
    monkeypatch.setattr(jobs_service, "DISCOVER_UNSEEN_S", 3600.0)
    async with feeding(tmp_path) as jobs:
        await asyncio.sleep(0.1)
        assert jobs.sweeps == 0  # not while the hosts start their samplers
        await until(lambda: jobs.sweeps == 1)  # the scan after DISCOVER_START_S
        await asyncio.sleep(0.3)
        assert jobs.sweeps == 1  # not shown: the next one is an hour away

        jobs.jobs_in_view(True)
        await until(lambda: jobs.sweeps >= 4)  # at once, then every 0.05 s

        jobs.jobs_in_view(False)
        await asyncio.sleep(0.1)  # a sweep already waiting may still run
        settled = jobs.sweeps
        await asyncio.sleep(0.3)
        assert jobs.sweeps == settled


async def test_opening_the_jobs_screen_at_start_scans_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs_service, "DISCOVER_START_S", 3600.0)
    monkeypatch.setattr(jobs_service, "DISCOVER_EVERY_S", 3600.0)
    async with feeding(tmp_path) as jobs:
        await asyncio.sleep(0.1)
        assert jobs.sweeps == 0
        jobs.jobs_in_view(True)
        await until(lambda: jobs.sweeps == 1)


async def test_the_first_scan_waits_for_every_hosts_first_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the app's "every host sampled" event, the first scan comes when it is set
    (not after the fixed DISCOVER_START_S), so it never competes with a slow start."""
    monkeypatch.setattr(jobs_service, "DISCOVER_START_S", 0.01)
    monkeypatch.setattr(jobs_service, "DISCOVER_START_MAX_S", 3600.0)
    monkeypatch.setattr(jobs_service, "DISCOVER_UNSEEN_S", 3600.0)
    sampled = asyncio.Event()
    async with feeding(tmp_path, hosts_sampled=sampled) as jobs:
        await asyncio.sleep(0.3)
        assert jobs.sweeps == 0  # DISCOVER_START_S is long past: the event rules
        sampled.set()
        await until(lambda: jobs.sweeps == 1)
