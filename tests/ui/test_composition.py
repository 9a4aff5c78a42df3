"""The composition root: one store every screen reads, the jobs screen written by key from
job row updates (a real SQLite history read off the loop), and validated settings."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey
from ui_fixtures import FROZEN_NOW, gpu_inventory, gpu_views

from console.errors import UsageError
from console.jobs.history import JobHistory
from console.jobs.models import JobPlan, JobState
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.settings import DEFAULT_SETTINGS, Settings, make_settings
from console.transport.base import HostState, HostStatus
from console.transport.pool import ClusterConnections
from console.ui.app import DistConsoleApp
from console.ui.jobs_service import JobRow, JobsService
from console.ui.screens.host_detail import HostDetailScreen
from console.ui.screens.jobs import JobsScreen
from console.ui.screens.logs import LogsScreen
from console.ui.widgets.steps_table import job_gpu_util

INVENTORY = gpu_inventory()


def make_app(settings: Settings = DEFAULT_SETTINGS) -> DistConsoleApp:
    return DistConsoleApp(
        INVENTORY, connections_factory=None, clock=lambda: FROZEN_NOW, settings=settings
    )


def ddp_plan(job_id: str) -> JobPlan:
    spec = make_spec(kind="ddp", program="example:ddp", hosts=("node0", "node1"))
    return plan(spec, INVENTORY, job_id=job_id)


async def next_rows(updates: Any, timeout: float = 10.0) -> list[JobRow]:
    rows: list[JobRow] = await asyncio.wait_for(updates.__anext__(), timeout)
    return rows


# -- jobs: rows by key -------------------------------------------------------------------


async def test_a_state_change_rewrites_its_row_in_place(tmp_path: Path) -> None:
    """History (real SQLite file) -> JobsService.row_updates -> app store -> jobs screen."""
    history = JobHistory(tmp_path / "jobs.sqlite3")
    older = ddp_plan("ddp-older")
    history.add(older, inventory=INVENTORY.path, state=JobState.SUCCEEDED, started=FROZEN_NOW - 60)
    history.add(ddp_plan("ddp-newer"), inventory=INVENTORY.path, started=FROZEN_NOW - 5)
    service = JobsService(
        ClusterConnections(INVENTORY),  # never started: rows come from the history only
        INVENTORY,
        settings=make_settings(history_refresh_s=0.05),
        history=history,
    )
    updates = service.row_updates()
    app = make_app()
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.press("j")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, JobsScreen)
        app.apply_job_rows(await next_rows(updates))
        await pilot.pause()
        table = screen.query_one("#jobs-table", DataTable)
        assert [table.get_row_at(i)[0].plain for i in range(2)] == ["ddp-newer", "ddp-older"]
        assert table.get_cell("ddp-newer", "state").plain == "starting"
        await pilot.press("down")  # the user's cursor on the older job
        newer_row = table.rows[RowKey("ddp-newer")]
        older_cells = list(table.get_row("ddp-older"))

        # Another console (or the CLI) marks the job failed: only that row changes.
        history.set_state("ddp-newer", JobState.FAILED, failure="node0 launcher failed")
        changed = await next_rows(updates)
        assert [(r.id, r.state) for r in changed] == [("ddp-newer", JobState.FAILED)]
        app.apply_job_rows(changed)
        await pilot.pause()

        assert table.rows[RowKey("ddp-newer")] is newer_row  # same row object: no rebuild
        assert table.get_row_index("ddp-newer") == 0
        assert table.get_cell("ddp-newer", "state").plain == "failed"
        assert list(table.get_row("ddp-older")) == older_cells
        assert screen.selected_id == "ddp-older"
        assert app.store.jobs["ddp-newer"].failure == "node0 launcher failed"

        # The same rows again (a history re-read that finds nothing new) change nothing.
        assert app.store.apply_jobs(list(app.store.jobs.values())) == []
    await updates.aclose()


async def test_a_new_job_is_added_by_key_and_listed_first() -> None:
    app = make_app()
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.press("j")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, JobsScreen)
        old = JobRow(
            "old", "old", "ddp", JobState.RUNNING, FROZEN_NOW - 90, None, ("node0",), 1, ""
        )
        app.apply_job_rows([old])
        await pilot.pause()
        table = screen.query_one("#jobs-table", DataTable)
        old_row = table.rows[RowKey("old")]
        new = JobRow("new", "new", "ddp", JobState.STARTING, FROZEN_NOW, None, ("node1",), 1, "")
        app.apply_job_rows([new])
        await pilot.pause()
        assert table.rows[RowKey("old")] is old_row
        assert [table.get_row_at(i)[0].plain for i in range(2)] == ["new", "old"]
        assert table.get_cell("old", "duration").plain == "1:30"


# -- one store -----------------------------------------------------------------------------


async def test_hosts_and_logs_screens_read_the_same_store() -> None:
    app = make_app()
    async with app.run_test(size=(160, 40)) as pilot:
        app.apply_statuses([HostStatus("node0", HostState.UP, since=FROZEN_NOW)])
        app.apply_views(gpu_views(0))
        await pilot.pause()
        logs = LogsScreen(
            plan(make_spec(kind="ddp", program="x.py"), INVENTORY, job_id="resnet-ddp"),
            app.services,
            follow_hosts=False,
        )
        await app.push_screen(logs)
        await pilot.pause()
        assert app.hosts_screen.services.store is logs.services.store is app.store
        assert app.hosts_screen.table.state_of("node0") == "up"

        def util() -> dict[object, float]:
            return job_gpu_util(logs.services.store.views.values(), logs.plan.job_id)

        assert util() == {0: 80.0, 1: 75.0, 2: 90.0, 3: 0.0}

        # One update through the app: both screens see it, neither asks the other.
        view = gpu_views(3)
        app.apply_statuses([HostStatus("node0", HostState.DOWN, reason="gone", since=FROZEN_NOW)])
        app.apply_views(view)
        await pilot.pause()
        assert app.hosts_screen.table.state_of("node0") == "down"
        assert util()[0] == 81.0  # step 3's figures, from the same store
        logs.dismiss(None)
        await pilot.pause()
        app.hosts_screen.table.move_cursor(row=0)
        await pilot.press("enter")
        await pilot.pause()
        detail = app.screen
        assert isinstance(detail, HostDetailScreen)
        assert detail.view is app.store.views["node0"]


# -- settings -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "named", "says"),
    [
        ({"refresh_s": 0}, "refresh_s", "greater than 0"),
        ({"monitor_interval_s": "fast"}, "monitor_interval_s", "'fast'"),
        ({"log_view_lines": 10}, "log_view_lines", "greater than or equal to 100"),
        ({"refresh_secs": 1.0}, "refresh_secs", "no such setting"),
    ],
)
def test_a_bad_setting_names_its_field(fields: dict[str, Any], named: str, says: str) -> None:
    with pytest.raises(UsageError) as caught:
        make_settings(**fields)
    assert caught.value.option == named
    assert says in str(caught.value)
    assert str(caught.value).startswith(f"{named}: ")


def test_settings_are_frozen_and_keep_their_defaults() -> None:
    settings = make_settings(monitor_interval_s=None)
    assert settings.monitor_interval_s is None
    assert settings.refresh_s == DEFAULT_SETTINGS.refresh_s == 1.0
    with pytest.raises(ValueError):
        settings.refresh_s = 2.0  # type: ignore[misc]


async def test_screens_take_their_limits_from_the_app_settings() -> None:
    app = make_app(make_settings(log_lines_per_rank=100, log_view_lines=200, log_context_lines=0))
    async with app.run_test(size=(120, 30)) as pilot:
        logs = LogsScreen(ddp_plan("ddp-limits"), app.services, follow_hosts=False)
        await app.push_screen(logs)
        await pilot.pause()
        assert logs.store.max_lines_per_rank == 100
        assert logs.view_lines == 200 and logs.context_lines == 0


async def test_attention_thresholds_come_from_the_settings() -> None:
    """node1's GPU 0 is at 91 C with 99% of its memory used; node0's GPU 3 idles under a job."""

    async def attention(settings: Settings) -> tuple[str, int]:
        app = make_app(settings)
        async with app.run_test(size=(130, 40)) as pilot:
            await pilot.press("g")
            app.apply_views(gpu_views(0))
            await pilot.pause()
            summary = app.cluster_screen._summary()
            return summary, sum(t.attention for t in app.cluster_screen._stats.values())

    summary, count = await attention(DEFAULT_SETTINGS)
    assert count == 2 and "2 GPUs need attention" in summary
    lenient = make_settings(attention_hot_c=95, attention_memory_full=1.0)
    summary, count = await attention(lenient)
    assert count == 1 and "1 GPU needs attention" in summary


async def test_logs_opened_from_another_screen_sit_on_the_jobs_stack(tmp_path: Path) -> None:
    # The palette reaches "logs of the selected job" from any screen; the logs screen's
    # q must come back to the jobs screen, so the logs open over it wherever asked.
    history = JobHistory(tmp_path / "jobs.sqlite3")
    history.add(ddp_plan("ddp-here"), inventory=INVENTORY.path, started=FROZEN_NOW - 5)
    app = make_app()
    async with app.run_test(size=(140, 30)) as pilot:
        app.services.jobs = JobsService(ClusterConnections(INVENTORY), INVENTORY, history=history)
        await pilot.press("g")
        await pilot.pause()
        assert app.current_mode != "jobs"
        app.open_logs("ddp-here")
        for _ in range(50):
            await pilot.pause(0.05)
            if isinstance(app.screen, LogsScreen):
                break
        assert isinstance(app.screen, LogsScreen)
        assert app.current_mode == "jobs"
        await pilot.pause(0.2)  # the logs screen mounted and focused
        await pilot.press("q")
        for _ in range(20):
            await pilot.pause(0.05)
            if isinstance(app.screen, JobsScreen):
                break
        assert isinstance(app.screen, JobsScreen)
