"""The job policy (console/hostprogs/supervisor/policy.py) fed scripted report streams,
and the supervisors' signed wire (supervisor_wire.py)."""

from __future__ import annotations

import pytest

from console.hostprogs.failure_lines import followed_another
from console.hostprogs.supervisor.policy import (
    HangSeen,
    HostSilent,
    JobPolicy,
    PolicyProcess,
    ProcessEnded,
    StopAsked,
)
from console.hostprogs.supervisor.source import supervisor_source
from console.hostprogs.supervisor.wire import WireGuard, WireRefused, wire_pack

DDP = [
    PolicyProcess("node0", "torchrun-0", "torchrun", (0,)),
    PolicyProcess("node1", "torchrun-1", "torchrun", (1,)),
]
PS = [
    PolicyProcess("node0", "ps-0", "ps"),
    PolicyProcess("node0", "worker-0", "worker"),
    PolicyProcess("node1", "worker-1", "worker"),
]


def test_fail_fast_stops_the_rest_once_and_names_the_first_failure() -> None:
    policy = JobPolicy(list(DDP), "ddp")
    assert policy.feed(ProcessEnded("node1", "torchrun-1", 3, 10.0, lines=("boom",))) is True
    assert policy.state == "failed" and not policy.over
    failure = policy.first_failure
    assert failure is not None
    assert (failure.host, failure.process, failure.rank, failure.exit_code) == (
        "node1",
        "torchrun-1",
        1,
        3,
    )
    assert failure.lines == ("boom",)
    # The rest dies of the stop: no second order, the cause stays.
    assert policy.feed(ProcessEnded("node0", "torchrun-0", 143, 11.0, "SIGTERM")) is False
    assert policy.over and policy.first_failure is failure


def test_the_rank_a_launcher_names_is_the_first_failures_rank() -> None:
    mpi = [PolicyProcess("node0", "launcher-0", "launcher", (0, 1, 2, 3))]
    policy = JobPolicy(mpi, "mpi")
    policy.feed(ProcessEnded("node0", "launcher-0", 3, 10.0, rank=2))
    failure = policy.first_failure
    assert failure is not None and (failure.rank, failure.ranks) == (2, (2,))
    assert failure.to_json()["ranks"] == [2]
    # Nothing named: the process's own ranks, the first as its rank.
    policy = JobPolicy(list(mpi), "mpi")
    policy.feed(ProcessEnded("node0", "launcher-0", 3, 10.0))
    assert policy.first_failure is not None
    assert (policy.first_failure.rank, policy.first_failure.ranks) == (0, (0, 1, 2, 3))


def test_first_failure_wins_even_when_reported_later() -> None:
    policy = JobPolicy(list(DDP), "ddp")
    assert policy.feed(ProcessEnded("node0", "torchrun-0", 1, 10.5)) is True
    # Ended earlier (its peer's collective broke because of it), reported later.
    assert policy.feed(ProcessEnded("node1", "torchrun-1", 3, 10.0)) is False
    assert policy.first_failure is not None and policy.first_failure.process == "torchrun-1"


LOST_PEER = (
    "root cause: rank 0 on node0: killed by SIGABRT at 2026-11-26_15:45:53",
    "[default0]:[rank0]: RuntimeError: [pair.cc:553] Connection closed by peer "
    "[127.0.0.1]:60835. This is typically caused by a remote worker crashing.",
)


def test_a_failure_that_followed_a_lost_peer_gives_way_to_the_crash_it_followed() -> None:
    """gloo aborted rank 0 when rank 1 crashed, and node0's torchrun ended first: the
    crash, reported by node1 after the stop was ordered, is the job's cause."""
    policy = JobPolicy(list(DDP), "ddp")
    assert policy.feed(ProcessEnded("node0", "torchrun-0", 1, 10.0, lines=LOST_PEER)) is True
    crash = ("root cause: rank 1 on node1: exit status 3 at 2026-11-26_15:45:53",)
    policy.feed(ProcessEnded("node1", "torchrun-1", 1, 11.0, lines=crash))
    failure = policy.first_failure
    assert failure is not None and (failure.host, failure.rank) == ("node1", 1)
    assert failure.lines == crash


@pytest.mark.parametrize(
    "later",
    [
        # killed by the stop this policy ordered: a signal, or torchrun telling of one
        ProcessEnded("node1", "torchrun-1", 143, 11.0, "SIGTERM"),
        ProcessEnded(
            "node1", "torchrun-1", 1, 11.0, lines=("root cause: rank 1: killed by SIGTERM",)
        ),
        # lost its peer too
        ProcessEnded("node1", "torchrun-1", 1, 11.0, lines=LOST_PEER[1:]),
        # too long after to be what the first one followed
        ProcessEnded("node1", "torchrun-1", 1, 30.0, lines=("boom",)),
    ],
)
def test_a_later_end_that_is_itself_a_consequence_is_no_cause(later: ProcessEnded) -> None:
    policy = JobPolicy(list(DDP), "ddp")
    policy.feed(ProcessEnded("node0", "torchrun-0", 1, 10.0, lines=LOST_PEER))
    policy.feed(later)
    assert policy.first_failure is not None and policy.first_failure.host == "node0"


def test_an_end_caused_by_the_stop_is_no_cause() -> None:
    policy = JobPolicy([*DDP, PolicyProcess("node1", "x-0", "x")], "ddp")
    policy.feed(ProcessEnded("node1", "torchrun-1", 3, 10.0))
    policy.feed(ProcessEnded("node0", "torchrun-0", 143, 12.0, "SIGTERM"))
    assert policy.first_failure is not None and policy.first_failure.process == "torchrun-1"


def test_no_fail_fast_lets_the_others_run_on() -> None:
    policy = JobPolicy(list(DDP), "ddp", fail_fast=False)
    assert policy.feed(ProcessEnded("node1", "torchrun-1", 3, 10.0)) is False
    assert policy.state == "running" and policy.first_failure is not None
    assert policy.feed(ProcessEnded("node0", "torchrun-0", 0, 20.0)) is False
    assert policy.over and policy.verdict == "failed"


def test_all_succeeded() -> None:
    policy = JobPolicy(list(DDP), "ddp")
    policy.feed(ProcessEnded("node0", "torchrun-0", 0, 1.0))
    assert not policy.over
    assert policy.feed(ProcessEnded("node1", "torchrun-1", 0, 2.0)) is False
    assert policy.over and policy.verdict == "succeeded" and policy.first_failure is None


def test_ps_rule_stops_the_parameter_servers_once_every_worker_succeeded() -> None:
    policy = JobPolicy(list(PS), "ps")
    assert policy.feed(ProcessEnded("node0", "worker-0", 0, 1.0)) is False
    assert policy.feed(ProcessEnded("node1", "worker-1", 0, 2.0)) is True
    assert policy.verdict == "succeeded" and not policy.over
    policy.feed(ProcessEnded("node0", "ps-0", 143, 3.0, "SIGTERM"))
    assert policy.over and policy.verdict == "succeeded" and policy.first_failure is None


def test_ps_rule_does_not_apply_after_a_failure() -> None:
    policy = JobPolicy(list(PS), "ps", fail_fast=False)
    policy.feed(ProcessEnded("node0", "worker-0", 2, 1.0))
    assert policy.feed(ProcessEnded("node1", "worker-1", 0, 2.0)) is False
    assert policy.verdict is None  # the ps runs on; nobody said stop


def test_a_silent_host_fails_the_job_naming_it() -> None:
    policy = JobPolicy(list(DDP), "ddp")
    assert policy.feed(HostSilent("node1", "connection lost (no heartbeat for 4 s)", 5.0)) is True
    failure = policy.first_failure
    assert failure is not None and failure.host == "node1" and failure.process is None
    assert "connection lost" in failure.reason
    # Its processes count as ended; the survivor's end makes the job over.
    policy.feed(ProcessEnded("node0", "torchrun-0", 143, 6.0, "SIGTERM"))
    assert policy.over and policy.verdict == "failed"


def test_a_host_silent_after_the_verdict_still_lets_the_job_end() -> None:
    policy = JobPolicy(list(DDP), "ddp")
    policy.feed(ProcessEnded("node0", "torchrun-0", 1, 1.0))
    policy.feed(HostSilent("node1", "connection lost", 2.0))
    assert policy.over and policy.first_failure is not None
    assert policy.first_failure.process == "torchrun-0"


def test_a_stop_asked_ends_stopped_not_failed() -> None:
    policy = JobPolicy(list(DDP), "ddp")
    assert policy.feed(ProcessEnded("node0", "torchrun-0", 143, 1.0, stop_requested=True)) is True
    policy.feed(ProcessEnded("node1", "torchrun-1", 143, 1.1, stop_requested=True))
    assert policy.over and policy.verdict == "stopped" and policy.first_failure is None
    other = JobPolicy(list(DDP), "ddp")
    assert other.feed(StopAsked("node1", 1.0)) is True and other.verdict == "stopped"


def test_a_hang_marks_the_job_and_stops_it_only_when_asked() -> None:
    policy = JobPolicy(list(DDP), "ddp")
    assert policy.feed(HangSeen(30.0, 25.0, stop=False)) is False
    assert policy.state == "hung" and policy.verdict is None
    stopping = JobPolicy(list(DDP), "ddp")
    assert stopping.feed(HangSeen(30.0, 25.0, stop=True)) is True
    assert stopping.verdict == "failed" and stopping.first_failure is not None
    assert "hung" in stopping.first_failure.reason


def test_the_wire_refuses_a_wrong_secret_a_replay_and_another_job() -> None:
    guard = WireGuard(b"s" * 32, "job-1")
    line = wire_pack(b"s" * 32, "job-1", {"type": "stop"}, now=100.0)
    assert guard.open(line, now=101.0) == {"type": "stop"}
    with pytest.raises(WireRefused, match="replayed"):
        guard.open(line, now=101.0)
    with pytest.raises(WireRefused, match="bad signature"):
        guard.open(wire_pack(b"x" * 32, "job-1", {"type": "stop"}, now=100.0), now=101.0)
    with pytest.raises(WireRefused, match="not this one"):
        guard.open(wire_pack(b"s" * 32, "job-2", {"type": "stop"}, now=100.0), now=101.0)
    with pytest.raises(WireRefused, match="stale"):
        guard.open(wire_pack(b"s" * 32, "job-1", {"type": "stop"}, now=100.0), now=1000.0)
    tampered = line.replace(b"stop", b"stap")
    with pytest.raises(WireRefused, match="bad signature"):
        WireGuard(b"s" * 32, "job-1").open(tampered, now=101.0)
    with pytest.raises(WireRefused, match="not a signed message"):
        guard.open(b"hello\n", now=101.0)


def test_the_supervisor_source_is_one_script_with_its_parts() -> None:
    source = supervisor_source()
    compile(source, "supervisor", "exec")
    assert source.count("from __future__ import annotations") == 1
    for name in ("def first_error", "class JobPolicy", "class WireGuard", "def supervisor_main"):
        assert name in source
    # jobctl's own entry point is left out: only the supervisor's runs.
    assert source.count('if __name__ == "__main__":') == 1


# torchrun's own report when gloo aborted its rank after a peer vanished: no line of the
# rank's says why (a CI run's node0, where rank 2 on node1 had exited 3).
ABORTED = (
    "console.examples.ddp_train FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "  <NO_OTHER_FAILURES>",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2026-11-26_20:03:41",
    "  host      : node0",
    "  rank      : 0 (local_rank: 0)",
    "  exitcode  : -6 (pid: 27284)",
    "  error_file: <N/A>",
    "  traceback : Signal 6 (SIGABRT) received by PID 27284",
    "============================================================",
)
# node1's: rank 2 exited 3 (the cause) and torchrun's abort of its neighbour is listed
# among the failures: still the cause.
CRASHED = (
    "Failures:",
    "[1]:",
    "  rank      : 3 (local_rank: 1)",
    "  exitcode  : -6 (pid: 27301)",
    "  traceback : Signal 6 (SIGABRT) received by PID 27301",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2026-11-26_20:03:41",
    "  host      : node1",
    "  rank      : 2 (local_rank: 0)",
    "  exitcode  : 3 (pid: 27300)",
)


def test_a_torchrun_whose_root_cause_was_aborted_gives_way_to_the_crash() -> None:
    assert followed_another(ABORTED) and not followed_another(CRASHED)
    policy = JobPolicy(list(DDP), "ddp")
    policy.feed(ProcessEnded("node0", "torchrun-0", 1, 10.0, lines=ABORTED))
    policy.feed(ProcessEnded("node1", "torchrun-1", 1, 12.0, lines=CRASHED))
    failure = policy.first_failure
    assert failure is not None and failure.host == "node1", failure
