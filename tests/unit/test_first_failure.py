"""With several failures, the one that ended first is the job's cause (the rest are
peers whose collective broke), whichever host's report reached the console first."""

from __future__ import annotations

from console.jobs.job import JobFailure, ProcessInfo
from console.jobs.models import RankLaunch
from console.jobs.watch import _failed_earlier

LAUNCH = RankLaunch("node1", "torchrun", 1, ("torchrun",), {}, "~", ())


def ended(status: int | None, at: float | None, note: str = "") -> ProcessInfo:
    return ProcessInfo("node1", "torchrun-1", LAUNCH, ended=True, exit_status=status,
                       note=note, ended_at=at)  # fmt: skip


def failure(at: float | None) -> JobFailure:
    return JobFailure("node0", "torchrun-0", (0,), 1, "", ended_at=at)


def test_a_failure_that_ended_first_replaces_a_later_one() -> None:
    assert _failed_earlier(ended(3, 100.0), failure(100.4))


def test_later_failures_stops_successes_and_unknown_times_keep_the_first() -> None:
    assert not _failed_earlier(ended(3, 100.5), failure(100.4))
    assert not _failed_earlier(ended(0, 99.0), failure(100.4))
    assert not _failed_earlier(ended(143, 99.0, note="stopped"), failure(100.4))
    assert not _failed_earlier(ended(3, None), failure(100.4))
    assert not _failed_earlier(ended(3, 99.0), failure(None))
    assert not _failed_earlier(ended(3, 99.0), None)
