"""--min-hosts in the console: the launch form's field, the jobs screen's state cell, the
logs header, and the line under a job (jobs screen notes, the report's summary)."""

from __future__ import annotations

import time
from typing import Any

from console.jobs.models import JobState
from console.jobs.report.bundle import host_view_lines
from console.ui.jobs_service import JobRow
from console.ui.screens.launch import form_to_spec
from console.ui.widgets.logs_summary import summary_parts
from tests.ui.test_restart_views import form


def test_the_launch_form_takes_min_hosts_and_names_its_problems() -> None:
    spec, errors = form_to_spec(form(min_hosts="2", max_restarts="1"))
    assert spec is not None and not errors and spec.min_hosts == 2
    spec, errors = form_to_spec(form(min_hosts="2", max_restarts="0"))
    assert spec is None and "needs --max-restarts" in errors["min_hosts"]
    spec, errors = form_to_spec(form(kind="ps", program="example:ps", min_hosts="1"))
    assert spec is None and "applies to --kind ddp" in errors["min_hosts"]


def test_the_jobs_screen_and_the_logs_header_show_the_hosts_left() -> None:
    row = JobRow(
        "j", "n", "ddp", JobState.RUNNING, time.time(), None, ("a", "b", "c"), 3, "",
        restarts=1, membership="2 of 3 hosts",
    )  # fmt: skip
    assert row.state_text == "running · restart 1 · 2 of 3 hosts"
    common: dict[str, Any] = {
        "job_id": "j", "received": 10, "following": True, "progress": None,
        "split_total": False, "stalled": (), "ranks": None, "search": None, "matches": 0,
        "filter_context": None, "note": None,
    }  # fmt: skip
    assert "2 of 3 hosts" in summary_parts(**common, membership="2 of 3 hosts")
    assert not any("hosts" in part for part in summary_parts(**common))


def test_the_line_under_a_job_names_each_scale_down_and_its_cause() -> None:
    view = {
        "scale_downs": [
            {"host": "c", "cause": "drained: GPU 0: row remapping failed", "at": 0.0,
             "hosts_now": ["a", "b"], "hosts_total": 3},
        ]
    }  # fmt: skip
    [line] = host_view_lines(view)
    assert line.startswith("scaled down at ")
    assert line.endswith(": c left (drained: GPU 0: row remapping failed); 2 of 3 hosts went on")


def test_the_live_jobs_row_counts_a_spare_once_it_joined() -> None:
    """The console's own job (its supervisors' records): node2 lost, spare node3 joined."""
    from console.jobs.membership import membership
    from console.jobs.ssh.jobctl_reports import SupervisorRecord
    from console.ui.jobs_service import membership_view

    hosts = ("node0", "node1", "node2", "node3")
    leader: dict[str, Any] = {"host": "node0", "leader": True, "spare_hosts": ["node3"]}
    waiting = SupervisorRecord.from_json(leader)
    assert membership(hosts, membership_view([waiting])) == ""  # 3 hosts, the spare waits
    leader["scale_downs"] = [{"host": "node2", "cause": "host lost"}]
    lost = SupervisorRecord.from_json(leader)
    assert membership(hosts, membership_view([lost])) == "2 of 3 hosts"
    leader["joins"] = [{"host": "node3", "at": 1.0}]
    joined = SupervisorRecord.from_json(leader)
    assert joined.spare_hosts == ("node3",) and joined.joins == ("node3",)
    assert membership(hosts, membership_view([joined])) == "3 of 3 hosts"
