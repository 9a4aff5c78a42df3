"""A slow rank shown where people look (issue 32, item 4): the jobs screen's state and
detail, the logs header, the GPU panel's host and GPU lines, and ``jobs``' plain table,
from a hand-made ``host_view`` with the leader's keys (``slow_ranks``): the scoring
itself is tested with the supervisors (tests/unit/test_pace_*)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static
from ui_fixtures import FROZEN_NOW, gpu_inventory, gpu_views

from console.commands.jobs import render
from console.jobs.history import JobRecord, JobSummary
from console.jobs.models import JobKind, JobState
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.ui.app import DistConsoleApp
from console.ui.jobs_service import JobRow, row_of_summary, with_pace
from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.jobs import KEYS, JobsScreen
from console.ui.screens.logs import LogsScreen
from console.ui.widgets.gpu_panel import HostPanel

JOB = "resnet-ddp"  # the job ui_fixtures' node0 runs, ranks 0-3 on GPUs 0-3
CAUSE = "GPU 2 clocks throttled: thermal slowdown"
SLOW_VIEW: dict[str, Any] = {
    "slow_ranks": [
        {"rank": 2, "host": "node0", "relative": 1.84, "cause": CAUSE, "since": FROZEN_NOW - 60},
        {"rank": "x", "host": "node0", "relative": 2.0, "cause": "odd", "since": 1.0},  # left out
    ],
    "rank_pace": [],
    "slow_periods": [],
}


def summary(state: JobState, view: dict[str, Any] | None) -> JobSummary:
    return JobSummary(
        JOB, "resnet", JobKind.DDP, state, FROZEN_NOW - 600, None, ("node0", "node1"), 8, None,
        view,
    )  # fmt: skip


def test_the_jobs_row_marks_the_slow_rank_from_the_leaders_keys() -> None:
    row = row_of_summary(summary(JobState.RUNNING, SLOW_VIEW))
    assert row.state_text == "running · slow: rank 2"
    assert [n for n in row.notes if n.startswith("slow ")] == [
        f"slow rank 2 on node0 busy 1.8x the median since {time_of(FROZEN_NOW - 60)}: {CAUSE}"
    ]
    # Ended: the last slow ranks are the report's history, not a mark.
    assert row_of_summary(summary(JobState.SUCCEEDED, SLOW_VIEW)).slow_ranks == ()
    assert row_of_summary(summary(JobState.RUNNING, {"slow_ranks": "junk"})).slow_ranks == ()


def time_of(t: float) -> str:
    import time

    return time.strftime("%H:%M:%S", time.localtime(t))


def test_a_live_jobs_row_takes_the_slow_ranks_its_hosts_last_gave() -> None:
    read = row_of_summary(summary(JobState.RUNNING, SLOW_VIEW))
    live = JobRow(JOB, "resnet", "ddp", JobState.RUNNING, FROZEN_NOW, None, ("node0",), 8, "")
    marked = with_pace(live, read)
    assert marked.slow_ranks == read.slow_ranks and marked.notes[-1].startswith("slow rank 2")
    assert with_pace(live, None) == live


def test_the_plain_jobs_table_marks_the_state_and_says_the_cause() -> None:
    planned = plan(make_spec(kind="ddp", program="train.py"), gpu_inventory(), job_id=JOB)
    record = JobRecord(
        id=JOB, name="resnet", kind=JobKind.DDP, state=JobState.RUNNING, started=FROZEN_NOW,
        ended=None, hosts=("node0", "node1"), inventory="hosts.yaml", fail_fast=True,
        plan=planned, failure=None, host_view=SLOW_VIEW,
    )  # fmt: skip
    text = render([record])
    assert "running · slow: rank 2" in text.splitlines()[1]
    assert text.splitlines()[-1].startswith(f"{JOB}: slow rank 2 on node0 busy 1.8x the median")
    assert text.splitlines()[-1].endswith(CAUSE)


async def test_the_gpu_panel_jobs_screen_and_logs_header_mark_the_slow_rank() -> None:
    app = DistConsoleApp(gpu_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.press("g")
        await pilot.pause()
        app.apply_views(gpu_views())
        app.apply_job_rows([row_of_summary(summary(JobState.RUNNING, SLOW_VIEW))])
        await pilot.pause()
        cluster = app.screen
        assert isinstance(cluster, ClusterScreen)
        panels = {p.host.name: p for p in cluster.query(HostPanel)}
        node0 = [line.plain for line in panels["node0"].lines()]
        assert f"⚠ slow: rank 2 of {JOB}, 1.8x the median: {CAUSE}" in node0
        gpu_lines = [line for line in node0 if line.lstrip().startswith(("0 ", "1 ", "2 ", "3 "))]
        assert [line for line in gpu_lines if "◀ SLOW rank 2" in line] == [gpu_lines[2]]
        assert not any(
            "slow" in line.lower() for line in (p.plain for p in panels["node1"].lines())
        )

        await pilot.press("j")
        await pilot.pause()
        jobs = app.screen
        assert isinstance(jobs, JobsScreen)
        detail = str(jobs.query_one("#job-detail", Static).render())
        assert "slow rank 2 on node0 busy 1.8x the median" in detail
        state = jobs._cells[JOB][KEYS.index("state")]
        assert isinstance(state, Text) and state.plain == "running · slow: rank 2"

        planned = plan(make_spec(kind="ddp", program="train.py"), gpu_inventory(), job_id=JOB)
        logs = LogsScreen(planned, app.services, follow_hosts=False)
        await app.push_screen(logs)
        await pilot.pause()
        logs.panels.summary()
        await pilot.pause()
        header = str(logs.query_one("#logs-summary", Static).render())
        assert f"SLOW rank 2 on node0 1.8x ({CAUSE})" in header

        # The rank is no longer slow: every mark goes.
        app.apply_job_rows([row_of_summary(summary(JobState.RUNNING, {}))])
        await pilot.pause()
        logs.panels.summary()
        await pilot.pause()
        assert "SLOW" not in str(logs.query_one("#logs-summary", Static).render())
        assert not any("slow" in line.plain.lower() for line in panels["node0"].lines())
