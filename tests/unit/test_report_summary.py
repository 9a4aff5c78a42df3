"""The words of a job's summary (``report``'s summary.txt, the jobs screen, ``jobs``)
when the supervisors recorded a hang or a named rank, from the records the supervisor
writes (the policy's own ``Failure.to_json``)."""

from __future__ import annotations

from typing import Any

from console.hostprogs.supervisor.policy import (
    HangSeen,
    JobPolicy,
    PolicyProcess,
    ProcessEnded,
)
from console.inventory import Host, Inventory
from console.jobs.history import JobRecord
from console.jobs.models import JobState
from console.jobs.plan.planner import plan
from console.jobs.report.bundle import HostBundle, process_lines, summary_lines
from console.jobs.report.discover import failure_text
from console.jobs.spec import make_spec
from console.ui.jobs_service import screen_notes

DDP = [
    PolicyProcess("n0", "torchrun-0", "torchrun", (0,)),
    PolicyProcess("n1", "torchrun-1", "torchrun", (1,)),
]


def record(state: JobState) -> JobRecord:
    inventory = Inventory(
        path="hosts.yaml",
        hosts=(Host(name="n0", address="10.0.0.1"), Host(name="n1", address="10.0.0.2")),
    )
    planned = plan(make_spec(kind="ddp", program="train.py"), inventory, job_id="job-1")
    return JobRecord(
        id="job-1", name="train", kind=planned.kind, state=state, started=1.0e9,
        ended=1.0e9 + 30, hosts=("n0", "n1"), inventory="hosts.yaml", fail_fast=True,
        plan=planned, failure=None,
    )  # fmt: skip


def test_a_job_stopped_on_hang_names_the_hang_as_its_cause_rounded() -> None:
    policy = JobPolicy(list(DDP), "ddp")
    assert policy.feed(HangSeen(1.0e9 + 25, 20.7735652923584, stop=True)) is True
    assert policy.first_failure is not None
    first = policy.first_failure.to_json()
    hang = {"at": 1.0e9 + 25, "idle_s": 20.7735652923584, "captured": ["torchrun-0", "torchrun-1"]}
    supervisor = {"host": "n0", "state": "failed", "first_failure": first, "hang": hang}
    lines = summary_lines(record(JobState.FAILED), supervisor)
    text = "\n".join(lines)
    assert lines[1] == "state: failed (recorded by n0's supervisor)"
    assert "first failure: hung: no progress for 21 s; stopped because --stop-on-hang" in lines
    assert "None" not in text and "20.77" not in text, text
    (hang_line,) = [line for line in lines if line.startswith("hang: ")]
    assert hang_line.startswith("hang: no progress for 21 s, marked at ")
    # A file has no keys: the jobs screen's hint is the screen's own.
    assert hang_line.endswith("captured torchrun-0, torchrun-1"), hang_line
    assert "r: report" not in text
    (screen_line,) = [n for n in screen_notes({"hang": hang}) if n.startswith("hang: ")]
    assert screen_line == hang_line + " (r: report)"


def test_a_rank_named_by_the_launcher_is_the_failures_rank() -> None:
    policy = JobPolicy([PolicyProcess("n0", "launcher-0", "launcher", (0, 1, 2, 3))], "mpi")
    policy.feed(ProcessEnded("n0", "launcher-0", 3, 10.0, rank=2))
    assert policy.first_failure is not None
    text = failure_text(policy.first_failure.to_json())
    assert text.startswith("n0 launcher-0 (rank 2) failed: exit status 3"), text
    # Not named: the process's ranks.
    policy = JobPolicy([PolicyProcess("n0", "launcher-0", "launcher", (0, 1, 2, 3))], "mpi")
    policy.feed(ProcessEnded("n0", "launcher-0", 3, 10.0))
    assert policy.first_failure is not None
    text = failure_text(policy.first_failure.to_json())
    assert text.startswith("n0 launcher-0 (ranks 0-3) failed: exit status 3"), text


def test_a_silent_host_reads_as_that_host_and_why() -> None:
    first: dict[str, Any] = {"host": "n1", "process": None, "rank": None, "exit_code": None,
             "signal": None, "reason": "no heartbeat for 4 s", "lines": [], "at": 5.0}  # fmt: skip
    assert failure_text(first) == "n1: no heartbeat for 4 s"


def test_process_lines_list_the_wrappers_not_the_jobs_other_scripts() -> None:
    """Horovod elastic's host discovery script sits beside the wrappers in the job
    directory: it is no process, so no 'no exit recorded' line."""
    bundle = HostBundle(
        "node0",
        {
            "horovodrun-0.sh": b"", "horovodrun-0.exit": b"0\n",
            "horovod-hosts.sh": b"", "ranks/rank.0/run.sh": b"",
        },
    )  # fmt: skip
    assert process_lines([bundle]) == ["  node0 horovodrun-0: exit 0"]
