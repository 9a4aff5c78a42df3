"""With several failures, the one that ended first is the job's cause (the rest are
peers whose collective broke), whichever host's report arrived first: the rule is the
job policy's (console/hostprogs/supervisor/policy.py), applied by the host supervisors
and by the console for a job no supervisor watches."""

from __future__ import annotations

from console.hostprogs.supervisor.policy import JobPolicy, PolicyProcess, ProcessEnded

PROCS = [
    PolicyProcess("node0", "torchrun-0", "torchrun", (0,)),
    PolicyProcess("node1", "torchrun-1", "torchrun", (1,)),
    PolicyProcess("node2", "torchrun-2", "torchrun", (2,)),
]


def cause(*ends: ProcessEnded) -> str | None:
    policy = JobPolicy(list(PROCS), "ddp")
    for end in ends:
        policy.feed(end)
    return policy.first_failure.process if policy.first_failure else None


def test_a_failure_that_ended_first_replaces_a_later_one() -> None:
    assert (
        cause(
            ProcessEnded("node0", "torchrun-0", 1, 100.4),
            ProcessEnded("node1", "torchrun-1", 3, 100.0),
        )
        == "torchrun-1"
    )


def test_later_failures_stops_and_successes_keep_the_first() -> None:
    first = ProcessEnded("node0", "torchrun-0", 1, 100.4)
    assert cause(first, ProcessEnded("node1", "torchrun-1", 3, 100.5)) == "torchrun-0"
    assert cause(first, ProcessEnded("node1", "torchrun-1", 0, 99.0)) == "torchrun-0"
    stopped = ProcessEnded("node1", "torchrun-1", 143, 99.0, "SIGTERM", stop_requested=True)
    assert cause(first, stopped) == "torchrun-0"
    assert cause(stopped) is None
