"""The runner's footing: a cluster's connections, the job helper run on a host, job
state changes saved to the history and published, and stopping a job everywhere.

:mod:`console.jobs.ssh.watch` builds its policy on this and :mod:`console.jobs.ssh.runner`
adds launching and re-attaching on top.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Protocol

from console.errors import JobError, TransportError
from console.inventory import Host, Inventory
from console.jobs.grace import DEFAULT_GRACE_S
from console.jobs.history import JobHistory
from console.jobs.models import JobState
from console.jobs.plan.placement import first_host_said
from console.jobs.ssh import jobctl_reports, remote_ops
from console.jobs.ssh.job import Job, JobEvent, StopReport
from console.transport.base import HostConnection

WATCH_INTERVAL_S = 0.2


class Connections(Protocol):
    """What the runner needs from :class:`console.transport.pool.ClusterConnections`."""

    def __getitem__(self, name: str) -> HostConnection: ...


class JobControl:
    """Host access, state changes and stopping, shared by the watch loop and the runner."""

    def __init__(
        self,
        connections: Connections,
        inventory: Inventory,
        *,
        history: JobHistory | None = None,
        grace_s: float = DEFAULT_GRACE_S,
        watch_interval_s: float = WATCH_INTERVAL_S,
    ) -> None:
        self.connections = connections
        self.inventory = inventory
        self.history = history
        self.grace_s = grace_s
        self.watch_interval_s = watch_interval_s
        self.jobs: dict[str, Job] = {}

    # -- helpers -------------------------------------------------------------------------

    def _host(self, name: str) -> Host:
        return self.inventory.get(name)

    def _conn(self, name: str) -> HostConnection:
        return self.connections[name]

    def require_up(self, hosts: Iterable[str], *, what: str = "the job") -> None:
        """Refuse (JobError) unless every host is up: a job never starts half-way."""
        down = []
        for name in hosts:
            status = self._conn(name).status
            if not status.is_up:
                reason = f": {status.reason}" if status.reason else ""
                down.append(f"{name} is {status.state.value}{reason}")
        if down:
            raise JobError(f"{what} was not started because " + "; ".join(down))

    async def _jobctl(
        self, host: str, op: str, args: dict[str, Any], *, timeout: float, input: str | None = None
    ) -> dict[str, Any]:
        command = remote_ops.jobctl_command(self._host(host), op, args)
        result = await self._conn(host).run(command, timeout=timeout, input=input)
        if not result.ok:
            detail = (result.stderr.strip() or result.stdout.strip())[-800:]
            raise JobError(
                f"{host}: job helper '{op}' failed (status {result.exit_status}): {detail}"
            )
        return jobctl_reports.one_shot(host, op, result.stdout)

    async def free_port(self, host: str, span: int = 1) -> int:
        """A TCP port P no process on ``host`` listens on right now, with P..P+span-1
        free too (a job that uses a range of ports from its master port)."""
        data = await self._jobctl(host, "free-port", {"span": span}, timeout=20)
        return jobctl_reports.free_port(data).port

    def _save(self, job: Job) -> None:
        if self.history is not None:
            failure = job.failure.describe() if job.failure else None
            if job.stop_report is not None and not job.stop_report.clean:
                failure = (failure + "\n" if failure else "") + job.stop_report.describe()
            self.history.set_state(job.id, job.state, failure=failure, ended=job.ended)

    def _set_state(self, job: Job, state: JobState, message: str = "") -> None:
        if job.state is state:
            return
        job.state = state
        self._save(job)
        job._publish(JobEvent(job.id, state, message=message))

    def _finish(self, job: Job, state: JobState) -> None:
        if job.finished:
            return
        if state in (JobState.FAILED, JobState.LOST):
            first_host_told(job)
        job.state = state
        job.ended = time.time()
        self._save(job)
        for remote in job._remote.values():
            with contextlib.suppress(TransportError):
                remote.write_eof()
            remote.close()
        message = job.failure.describe() if job.failure else ""
        job._done.set()
        job._publish(JobEvent(job.id, state, message=message), last=True)

    async def _stop_everywhere(self, job: Job, *, grace_s: float) -> StopReport:
        hosts = job.hosts
        outcomes = await asyncio.gather(
            *(self._stop_on(job, h, grace_s) for h in hosts), return_exceptions=True
        )
        remaining: dict[str, tuple[str, ...]] = {}
        unreachable: dict[str, str] = {}
        for host, outcome in zip(hosts, outcomes, strict=True):
            if isinstance(outcome, Exception):
                unreachable[host] = str(outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
            elif outcome:
                remaining[host] = outcome
        return StopReport(remaining, unreachable)

    async def _stop_on(self, job: Job, host: str, grace_s: float) -> tuple[str, ...]:
        args = {
            "job_id": job.id,
            "job_dir": job.plan.job_dirs.get(host, ""),
            "grace": grace_s,
            "names": [p.name for p in job.on_host(host)],
        }
        result = jobctl_reports.stopped(
            await self._jobctl(host, "stop", args, timeout=grace_s + 30)
        )
        for report in result.processes:
            info = job.processes.get((host, report.name))
            if info is not None and not info.ended:
                info.ended, info.running = True, False
                info.exit_status = report.exit_status
                info.note = "stopped"
        return tuple(f"pid {p.pid}: {p.command}" for p in result.remaining)


def first_host_told(job: Job) -> None:
    """A job that ends with its first host lost, when the plan said that host cannot be
    lost (an elastic job's rendezvous): its failure repeats the plan's line, which says
    how to avoid it next time."""
    said = next(filter(None, (first_host_said(job.plan.notes, h) for h in job.lost_hosts)), None)
    failure = job.failure
    if said is None or failure is None or failure.exit_status is not None:
        return  # an exit status is told with its reason in brackets: no room for a line
    if said in failure.reason:
        return
    job.failure = replace(failure, reason=f"{failure.reason}\n{said}")
