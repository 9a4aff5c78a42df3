"""The jobs screen's report key (``r``) and the notes under the selected job, with Pilot.

The rows come the way the console reads them: a history record whose hosts' view (what
``jobs/report/discover.py`` merges from the supervisors: a dead supervisor, a hang) becomes the
row's notes through ``JobsService.history_rows``. The report is written by the real
``make_report`` into a temporary working directory; the job's hosts are never connected
(addresses nobody answers), so the bundle says so host by host, as it does for a host
that is down."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Static
from ui_fixtures import FROZEN_NOW

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
    path="/srv/report/hosts.yaml",
    hosts=(
        Host(name="node0", address="10.0.0.10", gpus=1),
        Host(name="node1", address="10.0.0.11", gpus=1),
    ),
)
PLAN = plan(
    make_spec(kind="ddp", program="train.py", gpus_per_host=1), INVENTORY, job_id="ddp-report"
)
HANG = {"idle_s": 20, "at": FROZEN_NOW - 30, "captured": ["node0/rank0", "node1/rank1"]}
FAILURE = "node1 torchrun-1 (rank 1) failed: exit status 3\nlast lines of its output:\nboom"


def history_with(tmp_path: Path, state: JobState, view: dict[str, Any]) -> JobHistory:
    history = JobHistory(tmp_path / "jobs.sqlite3")
    history.add(PLAN, inventory=INVENTORY.path, started=FROZEN_NOW - 60)
    failure = FAILURE if state is JobState.FAILED else None
    ended = FROZEN_NOW - 10 if state.finished else None
    history.record_from_hosts(PLAN.job_id, state, ended=ended, failure=failure, view=view)
    return history


async def jobs_screen(pilot: Pilot[Any], app: DistConsoleApp, history: JobHistory) -> JobsScreen:
    service = JobsService(ClusterConnections(INVENTORY), INVENTORY, history=history)
    app.services.jobs = service
    await pilot.press("j")
    app.apply_job_rows(await service.history_rows())
    await pilot.pause()
    assert isinstance(app.screen, JobsScreen)
    return app.screen


def make_app() -> DistConsoleApp:
    return DistConsoleApp(INVENTORY, connections_factory=None, clock=lambda: FROZEN_NOW)


def detail(screen: JobsScreen) -> str:
    return str(screen.query_one("#job-detail", Static).render())


def notes(app: DistConsoleApp) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def test_the_selected_job_shows_the_supervisors_notes(tmp_path: Path) -> None:
    view = {"supervisor": "hung", "hung": True, "hang": HANG, "unsupervised": ["node1"]}
    history = history_with(tmp_path, JobState.RUNNING, view)
    app = make_app()
    async with app.run_test(size=(160, 40)) as pilot:
        screen = await jobs_screen(pilot, app, history)
        assert screen.selected_id == PLAN.job_id
        lines = detail(screen).splitlines()
        assert lines[0] == "ddp-report: running"
        assert lines[1].startswith("unsupervised on node1: the supervisor died")
        assert lines[2].startswith("hang: no progress for 20 s, marked at ")
        assert lines[2].endswith("captured node0/rank0, node1/rank1 (r: report)")


async def test_a_job_without_notes_shows_its_state_and_failure_only(tmp_path: Path) -> None:
    history = history_with(tmp_path, JobState.FAILED, {"supervisor": "failed"})
    app = make_app()
    async with app.run_test(size=(160, 40)) as pilot:
        screen = await jobs_screen(pilot, app, history)
        assert detail(screen).splitlines() == ["ddp-report: failed", *FAILURE.splitlines()]


async def test_r_writes_the_report_in_the_working_directory_and_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    history = history_with(tmp_path, JobState.FAILED, {"supervisor": "failed"})
    app = make_app()
    async with app.run_test(size=(160, 40)) as pilot:
        await jobs_screen(pilot, app, history)
        await pilot.press("r")
        await app.workers.wait_for_complete()
        await pilot.pause()
        out = tmp_path / f"distconsole-report-{PLAN.job_id}"
        summary = (out / "summary.txt").read_text()
        said = notes(app)
        assert said[0] == f"Writing the report of {PLAN.job_id} to {out}…"
        assert said[-1].startswith(f"Report written to {out}/\n")
        assert said[-1].splitlines()[1:] == summary.splitlines()[:6]
        assert "node1 torchrun-1 (rank 1) failed: exit status 3" in summary
        # Neither host was reached: the bundle says so for each, instead of failing.
        for host in ("node0", "node1"):
            assert f"{host}: {host} is connecting: not connected yet" in summary, summary
