"""The jobs screen's rows: one :class:`JobRow` per job, from a live ``Job`` (this console
runs it) or a history summary (its hosts' last read: supervisors' notes, restarts,
membership, the leader's slow ranks). Split from ``jobs_service.py``, which re-exports
these names. No textual here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from console.jobs.history import JobSummary
from console.jobs.membership import membership, with_spares
from console.jobs.models import JobState
from console.jobs.report.bundle import host_view_lines
from console.jobs.report.slow_ranks import (
    RankPace,
    SlowRank,
    rank_pace,
    slow_mark,
    slow_ranks,
    slow_words,
)
from console.jobs.ssh.runner import Job


@dataclass(frozen=True, slots=True)
class JobRow:
    """One line of the jobs screen, from a live Job or a history record."""

    id: str
    name: str
    kind: str
    state: JobState
    started: float
    ended: float | None
    hosts: tuple[str, ...]
    ranks: int
    failure: str
    # What the hosts' supervisors add (a dead supervisor, a hang): jobs/report/bundle.py's lines.
    notes: tuple[str, ...] = ()
    restarts: int = 0  # --max-restarts: restarts so far (the leader's supervisor's count)
    membership: str = ""  # "2 of 3 hosts" after a scale-down (--min-hosts)
    slow_ranks: tuple[SlowRank, ...] = ()  # the leader's slow ranks now (issue 32)
    rank_pace: tuple[RankPace, ...] = ()  # every rank's latest window (for /metrics)
    rendezvous_host: str = ""  # --rendezvous-host: apart from ``hosts``, it trains nothing

    @property
    def state_text(self) -> str:
        """``running``, or ``running · restart 2`` once the job restarted, ``running ·
        slow: rank 2`` while a rank holds it back."""
        return (
            self.state.value
            + (f" · restart {self.restarts}" if self.restarts else "")
            + (f" · {self.membership}" if self.membership else "")
            + (f" · {slow_mark(list(self.slow_ranks))}" if self.slow_ranks else "")
        )

    def duration(self, now: float) -> float:
        return (self.ended or now) - self.started


def row_of_job(job: Job) -> JobRow:
    failure = job.failure.describe() if job.failure else ""
    restarts = max((getattr(r, "restarts", 0) for r in job.supervisors.values()), default=0)
    rendezvous = job.plan.rendezvous_host or ""
    return JobRow(
        job.id, job.plan.name, job.plan.kind.value, job.state, job.started, job.ended,
        tuple(h for h in job.hosts if h != rendezvous), job.plan.world_size, failure,
        restarts=restarts,
        membership=membership(
            job.hosts, with_spares(membership_view(job.supervisors.values()), job.plan)
        ),
        rendezvous_host=rendezvous,
    )  # fmt: skip


def membership_view(records: Iterable[Any]) -> dict[str, Any]:
    """The supervisors' records (the leader's holds them) as ``membership.membership`` reads
    a host view: scale-downs, spares and the spares that joined."""
    records = list(records)
    return {
        "scale_downs": [{"host": h} for r in records for h in getattr(r, "scale_downs", ())],
        "spare_hosts": [h for r in records for h in getattr(r, "spare_hosts", ())],
        "joins": [{"host": h} for r in records for h in getattr(r, "joins", ())],
    }


REPORT_HINT = " (r: report)"  # the jobs screen's key; summary.txt has no keys


def screen_notes(view: Mapping[str, Any]) -> tuple[str, ...]:
    """``host_view_lines`` for the jobs screen: a hang line names the key that packs
    its captures."""
    lines = host_view_lines(view)
    return tuple(line + REPORT_HINT if line.startswith("hang: ") else line for line in lines)


def row_of_summary(summary: JobSummary) -> JobRow:
    # A finished job's last slow ranks are the report's (its slow periods), not a mark.
    running = summary.state is JobState.RUNNING
    slow = tuple(slow_ranks(summary.host_view)) if running else ()
    pace = tuple(rank_pace(summary.host_view)) if running else ()
    notes = screen_notes(summary.host_view or {}) + tuple(f"slow {slow_words(s)}" for s in slow)
    rendezvous = summary.rendezvous_host or ""
    view = {**(summary.host_view or {}), "rendezvous_host": rendezvous}
    return JobRow(
        summary.id, summary.name, summary.kind.value, summary.state, summary.started,
        summary.ended, tuple(h for h in summary.hosts if h != rendezvous), summary.world_size,
        summary.failure or "", notes, int((summary.host_view or {}).get("restarts") or 0),
        membership(summary.hosts, view), slow, pace, rendezvous,
    )  # fmt: skip


def with_pace(row: JobRow, read: JobRow | None) -> JobRow:
    """A live job's row with the slow ranks its hosts' last read (``read``: its history
    row) gave: the console's own runner does not score ranks, the leader does."""
    if read is None or row.state is not JobState.RUNNING:
        return row
    notes = row.notes + tuple(n for n in read.notes if n.startswith("slow "))
    return replace(row, slow_ranks=read.slow_ranks, rank_pace=read.rank_pace, notes=notes)


def rendezvous_roles(rows: Iterable[JobRow]) -> dict[str, str]:
    """host -> ``rendezvous of JOB`` for the jobs still running whose rendezvous host it is
    (--rendezvous-host: the GPU screen labels it apart from the hosts that train)."""
    found: dict[str, list[str]] = {}
    for row in rows:
        if row.rendezvous_host and not row.state.finished:
            found.setdefault(row.rendezvous_host, []).append(row.id)
    return {host: "rendezvous of " + ", ".join(jobs) for host, jobs in found.items()}
