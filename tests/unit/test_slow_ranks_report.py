"""The leader's slow-rank keys (issue 32) in the report (summary.txt's per-rank busy/wait
table and slow periods, timeline.txt's slow periods), ``/metrics``
(``distconsole_rank_relative_speed``) and the checks on what comes from the hosts: a
hand-made ``host_view``/``supervisor.json`` shaped as the leader writes it
(``hostprogs/pace/score.py`` ``PaceBoard.record``)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from console.inventory import Host, Inventory
from console.jobs.history import JobRecord
from console.jobs.models import JobState
from console.jobs.plan.planner import plan
from console.jobs.report.bundle import HostBundle, write_bundle
from console.jobs.report.membership import when
from console.jobs.report.slow_ranks import rank_pace, slow_periods, slow_ranks
from console.jobs.spec import make_spec
from console.metrics.collector import ClusterCollector
from console.metrics.exposition import render_text
from console.metrics.feeds import job_figures
from console.metrics.source import MetricsSource

T0 = 1_700_000_000.0
CAUSE = "CPU: cgroup quota throttled 74% of the time (/sys/fs/cgroup/cpu/slow, quota 0.25 CPU)"
PACE: dict[str, Any] = {
    "slow_ranks": [{"rank": 2, "host": "n2", "relative": 3.1, "cause": CAUSE, "since": T0 + 30}],
    "rank_pace": [
        {"rank": r, "host": f"n{r}", "busy": b, "wait": w, "relative": rel, "window_end": T0 + 90}
        for r, b, w, rel in ((0, 0.31, 0.69, 1.0), (1, 0.30, 0.70, 0.97), (2, 0.96, 0.04, 3.1))
    ],
    "slow_periods": [
        {"rank": 1, "host": "n1", "since": T0, "until": T0 + 20, "cause": "unknown"},
        {"rank": 2, "host": "n2", "since": T0 + 30, "until": None, "cause": CAUSE},
    ],
}  # fmt: skip


def clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def record(
    view: dict[str, Any] | None, state: JobState = JobState.RUNNING, job_id: str = "job-1"
) -> JobRecord:
    inventory = Inventory(
        path="hosts.yaml",
        hosts=tuple(Host(name=f"n{i}", address=f"10.0.0.{i + 1}") for i in range(3)),
    )
    planned = plan(make_spec(kind="ddp", program="train.py"), inventory, job_id="job-1")
    return JobRecord(
        id=job_id, name="train", kind=planned.kind, state=state, started=T0, ended=None,
        hosts=("n0", "n1", "n2"), inventory="hosts.yaml", fail_fast=True, plan=planned,
        failure=None, host_view=view,
    )  # fmt: skip


def test_the_report_has_a_busy_wait_table_and_the_slow_periods(tmp_path: Path) -> None:
    supervisor = {"host": "n0", "state": "running", **PACE}
    leader = HostBundle("n0", {"supervisor.json": json.dumps(supervisor).encode()})
    events = {"t": T0 + 60, "event": "rank-slow", "rank": 2, "since": T0 + 30}
    follower = HostBundle("n2", {"events.n2.jsonl": (json.dumps(events) + "\n").encode()})
    write_bundle(record({}), [leader, follower], tmp_path)
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    start = summary.index(
        f"rank pace (the leader's last window, ended {clock(T0 + 90)}; busy vs the median rank):"
    )
    assert summary[start + 1].split() == ["RANK", "HOST", "BUSY", "WAIT", "RELATIVE"]
    assert summary[start + 2].split() == ["0", "n0", "31%", "69%", "1.00x"]
    assert summary[start + 4].split() == ["2", "n2", "96%", "4%", "3.10x", "SLOW"]
    assert summary[start + 5 : start + 8] == [
        "slow periods:",
        f"  rank 1 on n1 {when(T0)} to {when(T0 + 20)} (20 s): unknown",
        f"  rank 2 on n2 from {when(T0 + 30)}, still slow when last recorded: {CAUSE}",
    ]
    timeline = (tmp_path / "timeline.txt").read_text().splitlines()
    assert timeline[0].startswith(f'{when(T0)} n1 slow-period rank=1 until="{when(T0 + 20)}"')
    assert timeline[1].startswith(f"{when(T0 + 30)} n2 slow-period rank=2")
    assert json.dumps(CAUSE) in timeline[1]
    assert " rank-slow " in timeline[2]  # the leader's own event, when it decided


def test_a_job_without_pace_keys_has_no_pace_lines(tmp_path: Path) -> None:
    leader = HostBundle("n0", {"supervisor.json": b'{"host": "n0", "state": "succeeded"}'})
    write_bundle(record(None, JobState.SUCCEEDED), [leader], tmp_path)
    summary = (tmp_path / "summary.txt").read_text()
    assert "rank pace" not in summary and "slow periods" not in summary
    assert "slow-period" not in (tmp_path / "timeline.txt").read_text()


def test_metrics_export_each_ranks_relative_speed() -> None:
    source = MetricsSource(clock=lambda: T0)
    source.set_jobs(
        [job_figures(record(PACE)), job_figures(record(PACE, JobState.SUCCEEDED, "job-0"))]
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(source))
    text = render_text(registry.collect())
    (family,) = [
        f
        for f in text_string_to_metric_families(text)
        if f.name == "distconsole_rank_relative_speed"
    ]
    speeds = {
        (s.labels["job"], s.labels["rank"], s.labels["Hostname"]): s.value for s in family.samples
    }
    # Only the running job (the finished one's last window is history), 1 / relative.
    assert set(speeds) == {("job-1", "0", "n0"), ("job-1", "1", "n1"), ("job-1", "2", "n2")}
    assert speeds[("job-1", "0", "n0")] == 1.0
    assert math.isclose(speeds[("job-1", "2", "n2")], 1 / 3.1)
    assert "# TYPE distconsole_rank_relative_speed gauge" in text


def test_what_comes_from_the_hosts_is_checked_entry_by_entry() -> None:
    odd: dict[str, Any] = {
        "slow_ranks": [
            {"rank": True, "host": "n0", "relative": 2.0, "since": T0},  # a bool is no rank
            {"rank": 1, "host": "n1", "relative": float("nan"), "since": T0},
            {"rank": 3, "host": "n3", "relative": 1.5, "since": T0},  # no cause: "unknown"
            "junk",
        ],
        "rank_pace": [  # a busy share as text
            {"rank": 0, "host": "n0", "busy": "0.5", "wait": 0.5, "relative": 1.0, "window_end": T0}
        ],
        "slow_periods": [{"rank": 0, "host": "n0", "since": T0, "until": "later"}],
    }
    assert [(s.rank, s.cause) for s in slow_ranks(odd)] == [(3, "unknown")]
    assert rank_pace(odd) == [] and slow_periods(odd) == []
    assert slow_ranks(None) == [] and slow_ranks({"slow_ranks": {"rank": 1}}) == []
