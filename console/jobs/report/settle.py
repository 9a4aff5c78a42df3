"""A job's final state when nothing of it is left alive to record one.

While its supervisor runs, the leader's ``supervisor.json`` is the job's truth. A scan
(:mod:`console.jobs.report.discover`) that finds no process and no supervisor of the job
alive on any host it can see knows nobody will write that record again, so it settles
the job itself, with what it saw:

- the leader's host does not answer and the followers' supervisors have ended: the job
  failed, and the leader's loss is its cause ("node0: host lost ... supervision lost on
  node0 at ..."), however the followers' own ranks ended: they lost the rendezvous the
  leader held. A follower that got the leader's final word before it went carries that
  word instead;
- every host answers, the leader's record still says running: its supervisor went away
  with the job (a crash, a host killed whole and back): ``stopped`` when a stop was asked
  for, ``succeeded`` when every process recorded exit 0, else ``failed`` with "supervision
  lost on node0 at ...";
- a host of the job does not answer: nothing final can be said, the job reads ``lost``.

The history keeps such a state for good (``history.STILL_OPEN``): a host that comes back
with its stale record never turns the job back into ``running``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from console.jobs.models import JobState
from console.jobs.plan.placement import first_host_said
from console.jobs.ssh.job import JobFailure

FINAL = {"succeeded": JobState.SUCCEEDED, "failed": JobState.FAILED, "stopped": JobState.STOPPED}
NOTHING_ALIVE = "no process or supervisor of the job is alive on any host that answers"


class ScannedCopy(Protocol):
    """One host's directory of the job, as the scan read it (scan.HostJob)."""

    @property
    def supervisor(self) -> dict[str, Any] | None: ...
    @property
    def supervisor_alive(self) -> bool | None: ...
    @property
    def processes(self) -> dict[str, dict[str, Any]]: ...
    @property
    def alive(self) -> int: ...
    @property
    def stop_requested(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class Settled:
    """The final state a scan records, its failure text, and when the job ended."""

    state: JobState
    failure: str | None
    at: float | None


def clock(at: Any) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at)) if isinstance(at, int | float) else "?"


def failure_text(failure: Mapping[str, Any], document: Mapping[str, Any] | None = None) -> str:
    """The supervisor's first failure in the words the console uses for one."""
    rank = failure.get("rank")
    signal = failure.get("signal")
    reason = f"killed by {signal}" if signal else ""
    cause = str(failure.get("reason") or failure.get("cause") or "")
    if not failure.get("process") and cause.startswith("hung"):
        # The policy records a hang as the cause only when the job stops on one.
        return f"{cause}; stopped because --stop-on-hang"
    ranks = [r for r in failure.get("ranks") or () if isinstance(r, int)]
    described = JobFailure(
        host=str(failure.get("host") or "?"),
        process=str(failure.get("process") or ""),
        ranks=tuple(ranks) or ((int(rank),) if isinstance(rank, int) else ()),
        exit_status=failure.get("exit_code"),
        reason=reason or ("" if failure.get("exit_code") is not None else cause),
        tail=tuple(str(line) for line in failure.get("lines") or ()),
        ended_at=failure.get("at"),
    )
    return described.describe()


def _first_failure(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    failure = (record or {}).get("first_failure")
    return failure if isinstance(failure, dict) else None


def judged_alone(record: Mapping[str, Any], leader: str) -> bool:
    """A follower's record written without the leader's final word: the leader's
    supervisor had gone (its connection closed: ``unsupervised``), or the follower took
    the leader as lost (silent, or ``lost-hosts/LEADER``: a ``(leader)`` process then
    stands for the leader's in its record, and its verdict may name the leader)."""
    gone = record.get("unsupervised")
    if isinstance(gone, dict) and leader in gone:
        return True
    if f"{leader}/(leader)" in (record.get("processes") or {}):
        return True  # taken as lost (peers.silent): its processes stood in for
    failure = _first_failure(record) or {}
    return failure.get("host") == leader and not failure.get("process")


def anything_alive(copies: Mapping[str, ScannedCopy]) -> bool:
    """A process of the job, or a supervisor that has not given its final word yet (one
    that has lingers a moment: its leftovers killed, notifications sent)."""
    return any(
        c.alive > 0
        or (c.supervisor_alive is True and (c.supervisor or {}).get("state") not in FINAL)
        for c in copies.values()
    )


def settle(
    hosts: Sequence[str],
    copies: Mapping[str, ScannedCopy],
    unreachable: Mapping[str, str],
    document: Mapping[str, Any] | None = None,
    notes: Sequence[str] = (),
) -> Settled | None:
    """The state a scan records for a job nothing of which is alive (see the module
    doc); None when something lives, or the leader's own final record stands.
    ``notes``: the plan's, when ``document`` (a known job's) comes without its plan."""
    if not hosts or anything_alive(copies):
        return None
    leader = hosts[0]
    truth = copies[leader].supervisor if leader in copies else None
    if truth is not None and truth.get("state") in FINAL:
        return None  # the leader's word
    if leader not in copies:
        if leader not in unreachable:
            return None
        plan = (document or {}).get("plan")
        told = [*notes, *((plan.get("notes") or ()) if isinstance(plan, dict) else ())]
        return _leader_lost(leader, copies, unreachable[leader], document, told)
    if truth is None or truth.get("state") not in ("running", "hung"):
        return None  # no supervisor record: the process files decide (discover.state)
    if any(h in unreachable for h in hosts):
        return Settled(JobState.LOST, None, None)  # what runs there is out of sight
    return _supervision_lost(leader, truth, copies, document)


def _leader_lost(
    leader: str,
    copies: Mapping[str, ScannedCopy],
    why: str,
    document: Mapping[str, Any] | None,
    notes: Sequence[object] = (),
) -> Settled | None:
    """The leader's host does not answer; its followers' supervisors have ended."""
    records = {h: c.supervisor for h, c in copies.items() if c.supervisor is not None}
    if not records:
        return None  # no follower was ever supervised (MPI's): nothing to go on
    for record in records.values():
        state = FINAL.get(str(record.get("state")))
        if state is not None and not judged_alone(record, leader):
            # The leader's final word reached this follower before it went.
            failure = _first_failure(record)
            text = failure_text(failure, document) if failure and state is JobState.FAILED else None
            return Settled(state, text, _float(record.get("ended_at")))
    closed = [
        gone[leader].get("at")
        for r in records.values()
        if isinstance(gone := r.get("unsupervised"), dict) and isinstance(gone.get(leader), dict)
    ]
    seen = [at for at in closed if isinstance(at, int | float)]
    how = "its supervisor's connection closed" if seen else "its supervisor fell silent"
    rendezvous = (document or {}).get("rendezvous_host") == leader  # job.json's
    lines = [
        f"{leader}: {'rendezvous host' if rendezvous else 'host'} lost (supervision lost on "
        f"{leader} at {clock(min(seen, default=None))}: {how}, and the host does not answer: "
        f"{why.splitlines()[0] if why else '?'})"
    ]
    said = first_host_said(notes, leader)
    lines += [said] if said else []  # the plan's line: how to avoid it next time
    lines += _consequences(leader, records, document)
    ended = [_float(r.get("ended_at")) for r in records.values()]
    return Settled(JobState.FAILED, "\n".join(lines), max((e for e in ended if e), default=None))


def _supervision_lost(
    leader: str,
    truth: Mapping[str, Any],
    copies: Mapping[str, ScannedCopy],
    document: Mapping[str, Any] | None,
) -> Settled:
    """Every host answers, the leader's record says running, nothing is alive."""
    last = _float(truth.get("heartbeat"))
    asked = [c.stop_requested for c in copies.values() if c.stop_requested is not None]
    # A follower's verdict from before the stop (its own, the leader gone): the job had
    # ended, and a stop run on it afterwards (nothing left) does not make it stopped.
    ended = [
        at
        for h, c in copies.items()
        if h != leader
        and (c.supervisor or {}).get("state") in ("failed", "succeeded")
        and (at := _float((c.supervisor or {}).get("ended_at"))) is not None
    ]
    if asked and not (ended and min(ended) < min(asked)):
        return Settled(JobState.STOPPED, None, max(asked))
    exits = [p.get("exit") for c in copies.values() for p in c.processes.values()]
    if exits and all(e == 0 for e in exits):
        return Settled(JobState.SUCCEEDED, None, last)
    lines = [
        f"{leader}: supervision lost on {leader} at {clock(last)} (its record stops there,"
        f" saying {truth.get('state')}); {NOTHING_ALIVE}"
    ]
    records = {h: c.supervisor for h, c in copies.items() if h != leader and c.supervisor}
    lines += _consequences(leader, records, document)
    return Settled(JobState.FAILED, "\n".join(lines), last)


def _consequences(
    leader: str,
    records: Mapping[str, Mapping[str, Any] | None],
    document: Mapping[str, Any] | None,
) -> list[str]:
    """The followers' own failures, told as what followed the leader's loss."""
    lines: list[str] = []
    for _host, record in sorted(records.items()):
        failure = _first_failure(record)
        if failure is not None and failure.get("host") == leader:
            then = failure.get("then")  # the follower's own, once the leader was lost
            failure = then if isinstance(then, dict) else None
        if failure is None:
            continue
        text = failure_text(failure, document)
        lines.append(f"then, with the rendezvous on {leader} gone: {text}")
    return lines


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None
