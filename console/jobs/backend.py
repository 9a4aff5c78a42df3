"""The seam every job backend plugs into: prepare -> pre-flight -> submit -> watch -> stop -> logs.

A backend turns a :class:`JobSpec` into a running job on some engine and reports on it
in the SSH jobs' own terms (:class:`JobState`, :class:`StopReport`, a :class:`JobPlan`
naming every log file), so the CLI and the UI drive SSH processes and a Slurm
allocation the same way:

- ``prepare(spec)`` plans without starting anything: :class:`Prepared` holds the plan
  (which log files each host will hold) and, for a scheduler, the script it submits;
- ``preflight(prepared)`` checks what can be checked before starting (raises
  PreflightError; returns warnings);
- ``submit(prepared)`` starts or queues it and returns the job id (the console's, not
  the scheduler's);
- ``status(job_id)`` asks once where the job stands (the history follows);
- ``watch(job_id)`` yields the current :class:`BackendStatus`, then every change, until
  the job has finished;
- ``stop(job_id)`` ends it everywhere and says what was left;
- ``logs(job_id)`` is the plan whose log files ``logs/targets.targets_from_plan`` follows
  (host, path, rank attribution, done markers).

:class:`SshBackend` wraps :class:`JobRunner`'s public methods (no policy here);
:mod:`console.jobs.slurm.backend` is the Slurm backend. :mod:`console.jobs.service` is the one
caller: the CLI and the UI launch, stop and ask through it. A Kubernetes backend is one
more class with these methods, and one more name in :data:`SCHEDULERS` and
``service.make_backend``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from console.inventory import Inventory
from console.jobs.history import JobHistory
from console.jobs.models import JobPlan, JobState
from console.jobs.preflight.health_gate import HealthCheck
from console.jobs.preflight.job import preflight_job
from console.jobs.spec import JobSpec
from console.jobs.ssh.runner import Job, JobRunner, StopReport

SCHEDULERS = ("ssh", "slurm")


@dataclass(frozen=True, slots=True)
class Prepared:
    """A planned job, not started: what ``plan`` shows and ``submit`` starts."""

    job_id: str
    spec: JobSpec
    plan: JobPlan  # every process (SSH) or task (Slurm) with its log files
    script: str | None = None  # a scheduler's batch script (Slurm); None for SSH
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BackendStatus:
    """One state of a job as the backend reports it."""

    job_id: str
    state: JobState
    detail: str = ""  # the engine's own words: "PENDING (Resources)", "slurm job 12", ...
    failure: str | None = None  # which task or process failed, and why

    @property
    def finished(self) -> bool:
        return self.state.finished


class JobBackend(Protocol):
    """What the CLI and the UI need from an engine that runs jobs (see the module doc)."""

    scheduler: str

    async def prepare(self, spec: JobSpec, *, job_id: str | None = None) -> Prepared: ...

    async def preflight(self, prepared: Prepared) -> tuple[str, ...]: ...

    async def submit(self, prepared: Prepared) -> str: ...

    async def status(self, job_id: str) -> BackendStatus: ...

    def watch(self, job_id: str) -> AsyncIterator[BackendStatus]: ...

    async def stop(self, job_id: str, *, grace_s: float | None = None) -> StopReport: ...

    async def logs(self, job_id: str) -> JobPlan: ...

    async def close(self) -> None: ...


class SshBackend:
    """The SSH processes backend: :class:`JobRunner` behind the seam."""

    scheduler = "ssh"

    def __init__(
        self,
        runner: JobRunner,
        *,
        health: HealthCheck | None = None,
        allow_unhealthy: bool = False,
    ) -> None:
        self.runner = runner
        self.health = health  # GPU verdicts for pre-flight (None: not checked)
        self.allow_unhealthy = allow_unhealthy

    @property
    def inventory(self) -> Inventory:
        return self.runner.inventory

    async def prepare(self, spec: JobSpec, *, job_id: str | None = None) -> Prepared:
        plan = await self.runner.prepare(spec, job_id=job_id)
        return Prepared(plan.job_id, spec, plan, warnings=plan.warnings)

    async def preflight(self, prepared: Prepared) -> tuple[str, ...]:
        report = await preflight_job(
            self.runner.connections,
            prepared.spec,
            prepared.plan,
            self.inventory,
            health=self.health,
            allow_unhealthy=self.allow_unhealthy,
        )
        report.raise_if_failed()
        return tuple(finding.line() for finding in report.warnings)

    async def submit(self, prepared: Prepared) -> str:
        job = await self.runner.launch(prepared.plan)
        return job.id

    async def job(self, job_id: str) -> Job:
        """A job this runner knows, else re-attached (unwatched) from the history."""
        job = self.runner.jobs.get(job_id)
        if job is not None:
            return job
        history = self.runner.history or JobHistory()
        record = await asyncio.to_thread(history.get, job_id)
        return await self.runner.attach(record, watch=False)

    async def status(self, job_id: str) -> BackendStatus:
        """Where the job stands: a job this runner watches as it is, else re-attached
        (its hosts' records read, the supervisors' verdict applied, the history updated)."""
        job = await self.job(job_id)
        failure = job.failure.describe() if job.failure is not None else None
        return BackendStatus(job_id, job.state, job.state.value, failure)

    async def watch(self, job_id: str) -> AsyncIterator[BackendStatus]:
        job = await self.job(job_id)
        async for event in job.events():
            failure = job.failure.describe() if job.failure is not None else None
            yield BackendStatus(job_id, event.state, event.message, failure)

    async def stop(self, job_id: str, *, grace_s: float | None = None) -> StopReport:
        return await self.runner.stop(await self.job(job_id), grace_s=grace_s)

    async def logs(self, job_id: str) -> JobPlan:
        job = self.runner.jobs.get(job_id)
        if job is not None:
            return job.plan
        history = self.runner.history or JobHistory()
        return (await asyncio.to_thread(history.get, job_id)).plan

    async def close(self) -> None:
        await self.runner.close()
