"""--max-restarts in the console: the launch form's fields, the jobs screen's state cell,
the logs header, and the line under a job (jobs screen notes, the report's summary)."""

from __future__ import annotations

import time
from typing import Any

from console.jobs.models import JobState
from console.jobs.report.bundle import host_view_lines
from console.ui.jobs_service import JobRow
from console.ui.screens.launch import TEXT_FIELDS, form_to_spec
from console.ui.widgets.logs_summary import summary_parts


def form(**values: Any) -> dict[str, Any]:
    base: dict[str, Any] = {name: "" for name, _, _ in TEXT_FIELDS}
    base.update(kind="ddp", hosts=(), program="example:ddp", fail_fast=True)
    base.update(values)
    return base


def test_the_launch_form_takes_max_restarts_and_a_checkpoint_dir() -> None:
    spec, errors = form_to_spec(form(max_restarts="2", checkpoint_dir="/shared/ck"))
    assert errors == {} and spec is not None
    assert (spec.max_restarts, spec.checkpoint_dir) == (2, "/shared/ck")
    spec, errors = form_to_spec(form(max_restarts="two"))
    assert spec is None and "not a whole number" in errors["max_restarts"]
    spec, errors = form_to_spec(form(checkpoint_dir="ck"))
    assert spec is None and "absolute path" in errors["checkpoint_dir"]


def test_the_jobs_screen_and_the_logs_header_show_the_restarts() -> None:
    row = JobRow("j", "n", "ddp", JobState.RUNNING, time.time(), None, ("a",), 2, "")
    assert row.state_text == "running"
    restarted = JobRow(
        "j", "n", "ddp", JobState.RUNNING, time.time(), None, ("a",), 2, "", restarts=2
    )
    assert restarted.state_text == "running · restart 2"
    common: dict[str, Any] = {
        "job_id": "j",
        "received": 10,
        "following": True,
        "progress": None,
        "split_total": False,
        "stalled": (),
        "ranks": None,
        "search": None,
        "matches": 0,
        "filter_context": None,
        "note": None,
    }
    assert "restart 1" in summary_parts(**common, restarts=1)
    assert not any("restart" in part for part in summary_parts(**common))


def test_the_line_under_a_job_names_the_last_restarts_cause() -> None:
    view = {
        "restarts": 1,
        "last_restart": {"rank": 1, "host": "node0", "exit_code": 3, "process": "torchrun-0"},
    }
    assert host_view_lines(view) == ["restarts: 1; the last: rank 1 on node0 (exit status 3)"]
    assert host_view_lines({"restarts": 0}) == []
