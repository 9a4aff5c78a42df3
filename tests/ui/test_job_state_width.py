"""A job's state is never cut at 80 columns (issue 30 item 4: an 80x24 terminal showed
"succeede"): the jobs screen under Textual's pilot at (80, 24), and the plain `jobs`
table with COLUMNS=80. The job has a real-length ID (as `launch ... example:ddp` names
it) and a real history."""

from __future__ import annotations

from pathlib import Path

import pytest
from ui_fixtures import FROZEN_NOW

from console.commands import jobs as jobs_command
from console.inventory import Host, Inventory
from console.jobs.history import JobHistory
from console.jobs.models import JobState
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.transport.pool import ClusterConnections
from console.ui.app import DistConsoleApp
from console.ui.jobs_service import JobsService
from console.ui.screens.jobs import JobsScreen

INVENTORY = Inventory(
    path="/srv/keys/hosts.yaml",
    hosts=tuple(Host(name=f"node{i}", address=f"10.0.0.{10 + i}", gpus=1) for i in range(4)),
)
JOB_ID = "ddp-example-ddp-20261128-065748-0298d1"
STATE = "succeeded · restart 1"


def history_with_one_job(tmp_path: Path) -> JobHistory:
    history = JobHistory(tmp_path / "jobs.sqlite3")
    spec = make_spec(
        kind="ddp",
        program="example:ddp",
        gpus_per_host=1,
        name="ddp-example-ddp",
        hosts=["node0", "node1", "node2"],
    )
    job = plan(spec, INVENTORY, job_id=JOB_ID)
    history.add(job, inventory=INVENTORY.path, started=FROZEN_NOW - 600)
    history.record_from_hosts(
        JOB_ID, JobState.SUCCEEDED, ended=FROZEN_NOW - 5, failure=None, view={"restarts": 1}
    )
    return history


async def test_the_jobs_screen_shows_the_whole_state_at_80x24(tmp_path: Path) -> None:
    history = history_with_one_job(tmp_path)
    app = DistConsoleApp(INVENTORY, connections_factory=None, clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(80, 24)) as pilot:
        service = JobsService(ClusterConnections(INVENTORY), INVENTORY, history=history)
        app.services.jobs = service
        await pilot.press("j")
        app.apply_job_rows(await service.history_rows())
        await pilot.pause()
        assert isinstance(app.screen, JobsScreen)
        lines = [strip.text for strip in app.screen._compositor.render_strips()]
        [row] = [line for line in lines if line.startswith(f" {JOB_ID} ")]
        assert f" {STATE} " in row, lines


def test_the_plain_jobs_table_shows_the_whole_state_with_columns_80(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    records = history_with_one_job(tmp_path).records(inventory=INVENTORY.path)
    table = jobs_command.render(records)
    [row] = [line for line in table.splitlines() if line.startswith(JOB_ID)]
    assert f"  {STATE}  " in row, table
