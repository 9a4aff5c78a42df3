"""Start, watch, stop and re-attach to jobs on their hosts.

Each planned process starts detached (its own session and process group) through one
``run()`` per host, with its output in files under the job directory and its exit
status and process group recorded there; so the job outlives the console, and any
later console can re-attach from the history row and those files.

The pieces: :mod:`console.jobs.job` (the Job and its records), :mod:`console.jobs.control`
(host access, state changes, stopping everywhere), :mod:`console.jobs.watch` (one watcher
per host and the policy: fail-fast, the PS rule, lost hosts); this module launches, stops
and re-attaches. ``Job``, ``StopReport`` and the rest are re-exported from here.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Sequence

from console.errors import JobError
from console.jobs import jobctl_reports, remote_ops
from console.jobs.control import DEFAULT_GRACE_S, WATCH_INTERVAL_S, Connections
from console.jobs.history import JobRecord, plan_hosts
from console.jobs.job import Job, JobEvent, JobFailure, ProcessInfo, StopReport
from console.jobs.jobctl_reports import ProcessReport
from console.jobs.models import JobKind, JobPlan, JobState, RankLaunch
from console.jobs.paths import new_job_id
from console.jobs.placement import select_hosts
from console.jobs.planner import plan
from console.jobs.spec import JobSpec, spec_with
from console.jobs.watch import PS_FINISHERS, TAIL_LINES, JobWatch

__all__ = [
    "DEFAULT_GRACE_S",
    "PS_FINISHERS",
    "START_TIMEOUT_S",
    "TAIL_LINES",
    "WATCH_INTERVAL_S",
    "Connections",
    "Job",
    "JobEvent",
    "JobFailure",
    "JobRunner",
    "ProcessInfo",
    "StopReport",
]

START_TIMEOUT_S = 60.0


class JobRunner(JobWatch):
    """Starts, watches and stops jobs over a cluster's connections (see module doc)."""

    # -- launch --------------------------------------------------------------------------

    @functools.cached_property
    def specs(self) -> dict[str, JobSpec]:
        """The spec of each job this runner prepared: launch writes it into job.json."""
        return {}

    async def prepare(self, spec: JobSpec, *, job_id: str | None = None) -> JobPlan:
        """Plan ``spec``; without a master port (ddp, ps), ask the master host for a free
        one first, so that the planner's port is one nobody listens on right now."""
        job_id = job_id or new_job_id(spec.display_name)
        if spec.master_port is None and spec.kind in (JobKind.DDP, JobKind.PS):
            master = select_hosts(spec, self.inventory)[0]
            self.require_up([master.name], what=f"job {job_id}")
            spec = spec_with(spec, master_port=await self.free_port(master.name))
        self.specs[job_id] = spec  # written into the hosts' job.json at launch
        return plan(spec, self.inventory, job_id=job_id)

    async def launch(self, plan: JobPlan) -> Job:
        """Start every process of ``plan``; returns once all run (state ``running``).

        Raises JobError, with nothing left running, when a host is not up or a start
        fails on any host.
        """
        hosts = plan_hosts(plan)
        self.require_up(hosts, what=f"job {plan.job_id}")
        job = Job(plan, inventory=self.inventory.path, started=time.time())
        self.jobs[job.id] = job
        if self.history is not None:
            self.history.add(plan, inventory=self.inventory.path)
        by_host: dict[str, list[RankLaunch]] = {h: [] for h in hosts}
        for launch in plan.launches:
            by_host[launch.host].append(launch)
        targets = [h for h in hosts if by_host[h] or any(u.host == h for u in plan.uploads)]
        outcomes = await asyncio.gather(
            *(self._start_on(job, h, by_host[h]) for h in targets), return_exceptions=True
        )
        errors = [
            (h, o) for h, o in zip(targets, outcomes, strict=True) if isinstance(o, BaseException)
        ]
        if errors:
            host, exc = errors[0]
            if not isinstance(exc, Exception):
                raise exc
            job.failure = JobFailure(host, "start", (), None, str(exc))
            job.stopping = True
            job.stop_report = await self._stop_everywhere(job, grace_s=2.0)
            self._finish(job, JobState.FAILED)
            raise JobError(
                f"job {job.id} could not start on {host}: {exc}; "
                f"what had started was stopped ({job.stop_report.describe()})"
            )
        self._set_state(job, JobState.RUNNING)
        self._watch(job, [h for h in hosts if by_host[h]])
        return job

    async def _start_on(self, job: Job, host: str, launches: Sequence[RankLaunch]) -> None:
        spec = self.specs.get(job.id)
        payload = remote_ops.start_payload(
            job.plan,
            self._host(host),
            launches,
            created_at=job.started,
            spec=spec.model_dump(mode="json") if spec is not None else None,
        )
        data = await self._jobctl(host, "start", {}, timeout=START_TIMEOUT_S, input=payload)
        for name, pgid in jobctl_reports.started(data).pgids.items():
            info = job.processes.get((host, name))
            if info is not None:
                info.pgid = pgid
                info.running = True

    # -- stop ----------------------------------------------------------------------------

    async def stop(self, job: Job, *, grace_s: float | None = None) -> StopReport:
        """SIGTERM every process group of the job on every host, SIGKILL after the grace
        period, then verify; the job ends ``stopped`` unless it had already ended."""
        job.stopping = True
        report = await self._stop_everywhere(
            job, grace_s=self.grace_s if grace_s is None else grace_s
        )
        job.stop_report = report
        if not job.finished:
            self._finish(job, JobState.STOPPED)
        return report

    # -- re-attach -----------------------------------------------------------------------

    async def attach(self, record: JobRecord, *, watch: bool = True) -> Job:
        """Re-attach to a job from the history: read its hosts' pgid/exit files, apply
        the job's policy to what ended meanwhile, and (``watch``) follow the rest."""
        if record.id in self.jobs:
            return self.jobs[record.id]
        job = Job.from_record(record)
        self.jobs[job.id] = job
        if job.finished:
            return job
        hosts = sorted({p.host for p in job.processes.values()})
        outcomes = await asyncio.gather(
            *(self._inspect(job, h) for h in hosts), return_exceptions=True
        )
        lost = {h: o for h, o in zip(hosts, outcomes, strict=True) if isinstance(o, Exception)}
        for host, outcome in zip(hosts, outcomes, strict=True):
            if isinstance(outcome, list):
                for report in outcome:
                    await self._on_report(job, host, report)
        if job.finished:
            return job
        if lost:
            reason = "; ".join(f"{h}: {e}" for h, e in lost.items())
            self._set_state(job, JobState.LOST, message=reason)
        else:
            self._set_state(job, JobState.RUNNING)
        if watch:
            self._watch(job, [h for h in hosts if h not in lost])
        return job

    async def _inspect(self, job: Job, host: str) -> list[ProcessReport]:
        args = {
            "job_id": job.id,
            "job_dir": remote_ops.host_job_dir(job.plan, host),
            "names": [p.name for p in job.on_host(host)],
        }
        data = await self._jobctl(host, "inspect", args, timeout=20)
        return list(jobctl_reports.inspected(data).processes)

    async def close(self) -> None:
        """Stop watching (the jobs keep running on their hosts)."""
        for job in self.jobs.values():
            for remote in list(job._remote.values()):
                remote.write_eof()
                remote.close()
            for task in job._watchers.values():
                task.cancel()
            await asyncio.gather(*job._watchers.values(), return_exceptions=True)
