"""A follower that judged alone after the leader's host was lost records the leader's
loss as its first failure, its own torchrun failure (the store gone) kept under
``then`` (hostprogs/supervisor/program.py ``after_leader_loss``; on real hosts:
tests/integration/test_leader_lost.py). A scan tells those as what followed."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from console.hostprogs.supervisor.program import LEADER_LOSS_WINDOW_S, Supervisor
from console.jobs.models import JobState
from tests.unit.test_job_final_states import RENDEZVOUS_ERROR, T0, copy, job

CLOSED = {"n0": {"at": T0 + 15, "why": "its connection closed (connection closed)"}}


def leader_cause(own: Mapping[str, Any]) -> dict[str, Any]:
    """What the follower's supervisor now writes (after_leader_loss's shape)."""
    return {
        **own, "host": "n0", "process": None, "rank": None, "ranks": [], "exit_code": None,
        "reason": "the leader n0 lost (its connection closed (connection closed))",
        "lines": [f"then torchrun on {own['host']}: exit status 1"], "at": T0 + 15,
        "then": own,
    }  # fmt: skip


def test_a_scan_tells_the_followers_own_failures_after_the_leaders_loss() -> None:
    followers = [
        copy(h, state="failed", exit_code=1, unsupervised=CLOSED, first_failure=leader_cause(f))
        for h, f in (("n1", RENDEZVOUS_ERROR), ("n2", dict(RENDEZVOUS_ERROR, host="n2")))
    ]
    found = job(*followers, unreachable={"n0": "n0: connection refused"})
    assert found.state() is JobState.FAILED
    first, *rest = (found.failure_text() or "").splitlines()
    assert first.startswith("n0: host lost (supervision lost on n0 at "), first
    told = [line for line in rest if line.startswith("then, with the rendezvous on n0 gone: ")]
    assert len(told) == 2 and "n1 torchrun-1" in told[0] and "n2 torchrun-1" in told[1], rest


def follower(**state: Any) -> SimpleNamespace:
    """The follower supervisor's fields ``after_leader_loss`` reads."""
    fields = {
        "host": "n1", "leader_host": "n0", "is_leader": False, "unsupervised": {},
        "leader_lost": False, "leader_seen": T0, "leader_error": "no heartbeat",
    }  # fmt: skip
    return SimpleNamespace(**{**fields, **state})


def own_failure(at: float) -> dict[str, Any]:
    return dict(RENDEZVOUS_ERROR, at=at, lines=["RendezvousConnectionError: store gone"])


def test_the_follower_names_the_leader_only_for_what_followed_its_loss() -> None:
    cause = Supervisor.after_leader_loss
    gone = follower(unsupervised=CLOSED)  # n0's connection closed at T0 + 15
    named = cause(gone, own_failure(T0 + 20))  # type: ignore[arg-type]
    assert named["host"] == "n0" and named["process"] is None and named["at"] == T0 + 15
    assert named["reason"] == "the leader n0 lost (its connection closed (connection closed))"
    assert named["then"] == own_failure(T0 + 20)
    assert named["lines"][0] == "then torchrun-1 on n1: exit status 1"
    # Its own failure before the loss, or long after it, stays the cause.
    for at in (T0 + 10, T0 + 15 + LEADER_LOSS_WINDOW_S + 1):
        assert cause(gone, own_failure(at)) == own_failure(at)  # type: ignore[arg-type]
    # Leader alive, or this is the leader: nothing changes.
    assert cause(follower(), own_failure(T0 + 20)) == own_failure(T0 + 20)  # type: ignore[arg-type]
    lead = follower(unsupervised=CLOSED, is_leader=True)
    assert cause(lead, own_failure(T0 + 20)) == own_failure(T0 + 20)  # type: ignore[arg-type]
    # Taken as lost when it fell silent: last heard from at leader_seen.
    silent = cause(follower(leader_lost=True, leader_seen=T0 + 5), own_failure(T0 + 9))  # type: ignore[arg-type]
    assert silent["host"] == "n0" and silent["reason"].startswith("the leader n0 lost (silent: ")
