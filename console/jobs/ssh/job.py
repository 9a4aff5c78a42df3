"""A job as the console knows it: its processes, state, events, and how it failed or
what a stop left behind. :mod:`console.jobs.ssh.runner` drives it; this module only holds it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from console.jobs.history import JobRecord
from console.jobs.models import JobPlan, JobState, RankLaunch
from console.jobs.plan_json import plan_hosts
from console.jobs.ssh import remote_ops


@dataclass
class ProcessInfo:
    """What the console knows about one launched process."""

    host: str
    name: str
    launch: RankLaunch
    pgid: int | None = None
    running: bool = False
    ended: bool = False
    exit_status: int | None = None  # None once ended: it vanished without recording one
    note: str = ""
    ended_at: float | None = None  # the host's clock when it ended, when recorded


@dataclass(frozen=True, slots=True)
class JobFailure:
    host: str
    process: str
    ranks: tuple[int, ...]
    exit_status: int | None
    reason: str
    tail: tuple[str, ...] = ()
    first_error: tuple[str, ...] = ()  # the cause, before the launcher's own report
    ended_at: float | None = None

    def describe(self) -> str:
        who = f"{self.host} {self.process}" if self.process else self.host
        if self.ranks:
            first, last = self.ranks[0], self.ranks[-1]
            who += f" (rank {first})" if first == last else f" (ranks {first}-{last})"
        what = f"exit status {self.exit_status}" if self.exit_status is not None else self.reason
        lines = [f"{who} failed: {what}" if self.process else f"{who}: {what}"]
        if self.exit_status is not None and self.reason:
            lines[0] += f" ({self.reason})"
        if self.first_error:
            if not self.first_error[0].startswith("root cause:"):
                lines.append("first error:")  # a root cause told says what it is
            lines += list(self.first_error)
        if self.tail:
            lines.append("last lines of its output:")
            lines += list(self.tail)
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class StopReport:
    """What a stop left behind: processes per host, and hosts it could not reach."""

    remaining: dict[str, tuple[str, ...]] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not self.remaining and not self.unreachable

    def describe(self) -> str:
        if self.clean:
            return "nothing of the job remains on any host"
        lines = []
        for host, procs in self.remaining.items():
            lines.append(f"{host}: {len(procs)} process(es) survived SIGKILL:")
            lines += [f"  {p}" for p in procs]
        for host, reason in self.unreachable.items():
            lines.append(f"{host}: not reached ({reason}); its processes are unknown")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class JobEvent:
    job_id: str
    state: JobState
    host: str | None = None
    process: str | None = None
    exit_status: int | None = None
    message: str = ""
    host_lost: bool = False  # ``host`` stopped answering (message says why)


class Job:
    """One job this console started or re-attached to."""

    def __init__(self, plan: JobPlan, *, inventory: str, started: float) -> None:
        self.plan = plan
        self.inventory = inventory
        self.started = started
        self.ended: float | None = None
        self.state = JobState.STARTING
        self.failure: JobFailure | None = None
        self.stop_report: StopReport | None = None
        self.stopping = False  # this console is stopping the job
        # Another console (or `distconsole stop`) is stopping it: its processes' deaths
        # are not failures, and it ends stopped once they have all ended.
        self.stopped_elsewhere = False
        self.processes: dict[tuple[str, str], ProcessInfo] = {
            key: ProcessInfo(key[0], key[1], launch)
            for key, launch in remote_ops.process_names(plan).items()
        }
        self._done = asyncio.Event()
        self._queues: list[asyncio.Queue[JobEvent | None]] = []
        self._watchers: dict[str, asyncio.Task[None]] = {}
        self._remote: dict[str, Any] = {}
        # The host supervisors (console/hostprogs/supervisor/program.py): whether the job has them,
        # what each last recorded, and hosts this console lost (with why) meanwhile.
        self.supervised = False
        self.supervisors: dict[str, Any] = {}
        self.lost_hosts: dict[str, str] = {}
        # (host, process) ends told to the leader for hosts whose supervisor is dead.
        self.ends_told: set[tuple[str, str]] = set()
        self.policy: Any = None  # hostprogs.supervisor_policy.JobPolicy, when applied here

    @classmethod
    def from_record(cls, record: JobRecord) -> Job:
        """The job as the history last saw it (not yet reconciled with its hosts)."""
        job = cls(record.plan, inventory=record.inventory, started=record.started)
        job.state = record.state
        if record.state.finished:
            job.ended = record.ended
            job._done.set()
        return job

    @property
    def id(self) -> str:
        return self.plan.job_id

    @property
    def hosts(self) -> tuple[str, ...]:
        return plan_hosts(self.plan)

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def on_host(self, host: str) -> list[ProcessInfo]:
        return [p for p in self.processes.values() if p.host == host]

    def pgids(self, host: str) -> list[int]:
        return [p.pgid for p in self.on_host(host) if p.pgid is not None]

    async def wait(self) -> JobState:
        await self._done.wait()
        return self.state

    async def events(self) -> AsyncIterator[JobEvent]:
        """The current state, then every change, until the job has finished."""
        queue: asyncio.Queue[JobEvent | None] = asyncio.Queue()
        queue.put_nowait(JobEvent(self.id, self.state))
        if self.finished:
            queue.put_nowait(None)
        self._queues.append(queue)
        try:
            while (event := await queue.get()) is not None:
                yield event
        finally:
            self._queues.remove(queue)

    def _publish(self, event: JobEvent, *, last: bool = False) -> None:
        for queue in self._queues:
            queue.put_nowait(event)
            if last:
                queue.put_nowait(None)
