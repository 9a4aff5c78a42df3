"""A follower that judged alone after the leader's host was lost records the leader's
loss as its first failure, its own torchrun failure (the store gone) kept under
``then`` (hostprogs/supervisor/program.py ``after_leader_loss``; on real hosts:
tests/integration/test_leader_lost.py). A scan tells those as what followed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
