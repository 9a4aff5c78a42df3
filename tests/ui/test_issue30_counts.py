"""Issue 30 (6): counts and labels say what is shown. The GPU screen's summary counts the
hosts the filter leaves, "1 job" (not "1 jobs"), the host detail says so when every GPU
is ok. Pilot drives the real app on fixed views (no GPU here) and a real job history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Static
from ui_fixtures import FROZEN_NOW, gpu_inventory, gpu_views

from console.inventory import Host, Inventory
from console.jobs.history import JobHistory
from console.jobs.models import JobState
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.transport.pool import ClusterConnections
from console.ui.app import DistConsoleApp
from console.ui.jobs_service import JobsService
from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.host_detail import HostDetailScreen
from console.ui.screens.jobs import JobsScreen


def make_app(inventory: Inventory | None = None) -> DistConsoleApp:
    return DistConsoleApp(
        inventory or gpu_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW
    )


async def open_gpus(app: DistConsoleApp, pilot: Pilot[Any]) -> ClusterScreen:
    await pilot.press("g")
    await pilot.pause()
    app.apply_views(gpu_views())
    await pilot.pause()
    assert isinstance(app.screen, ClusterScreen)
    return app.screen


def summary(screen: ClusterScreen) -> str:
    return str(screen.query_one("#cluster-summary", Static).render())


async def test_the_filter_summary_counts_the_hosts_it_shows() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await open_gpus(app, pilot)
        assert summary(screen).startswith("4 hosts (3 up, 1 down)  ·  8 GPUs")
        await pilot.press("slash", *"rack1", "enter")
        await pilot.pause()
        assert screen.visible_hosts() == ["node0", "node3"]
        # node0's 4 GPUs; node3 is down (its stale sample is not counted).
        assert "2 hosts (1 up, 1 down)  ·  4 GPUs: 3 busy, 1 idle" in summary(screen)
        await pilot.press("escape", "slash", *"rack2", "enter")
        await pilot.pause()
        assert "1 host  ·  2 GPUs" in summary(screen)
        assert "1 GPU needs attention" in summary(screen)
        await pilot.press("escape", "a")
        await pilot.pause()
        shown = screen.visible_hosts()
        assert f"{len(shown)} hosts" in summary(screen)


async def test_host_detail_says_every_gpu_is_ok() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await open_gpus(app, pilot)
        for name, expected in (("node2", True), ("node1", False)):
            app.push_screen(HostDetailScreen(gpu_inventory().get(name), app.services))
            await pilot.pause()
            header = str(app.screen.query_one("#detail-host", Static).render())
            assert ("Health: all 2 GPUs are ok (no alert, no health event)" in header) is expected
            app.pop_screen()
            await pilot.pause()


async def test_one_job_is_one_job(tmp_path: Path) -> None:
    inventory = Inventory(
        path="/srv/count/hosts.yaml", hosts=(Host(name="node0", address="10.0.0.10", gpus=1),)
    )
    job = plan(make_spec(kind="ddp", program="t.py", gpus_per_host=1), inventory, job_id="one")
    history = JobHistory(tmp_path / "jobs.sqlite3")
    history.add(job, inventory=inventory.path, started=FROZEN_NOW - 60)
    history.record_from_hosts(
        "one", JobState.SUCCEEDED, ended=FROZEN_NOW - 5, failure=None, view={}
    )
    app = make_app(inventory)
    async with app.run_test(size=(200, 50)) as pilot:
        service = JobsService(ClusterConnections(inventory), inventory, history=history)
        app.services.jobs = service
        await pilot.press("j")
        app.apply_job_rows(await service.history_rows())
        await pilot.pause()
        assert isinstance(app.screen, JobsScreen)
        line = str(app.screen.query_one("#jobs-summary", Static).render())
        assert line.startswith("1 job  ·  0 not finished")
