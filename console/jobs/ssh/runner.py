"""Start, watch, stop and re-attach to jobs on their hosts.

Each planned process starts detached (its own session and process group) through one
``run()`` per host, with its output in files under the job directory and its exit
status and process group recorded there; so the job outlives the console, and any
later console can re-attach from the history row and those files.

The pieces: :mod:`console.jobs.ssh.job` (the Job and its records), :mod:`console.jobs.ssh.control`
(host access, state changes, stopping everywhere), :mod:`console.jobs.ssh.watch` (one watcher
per host and the policy: fail-fast, the PS rule, lost hosts); this module launches, stops
and re-attaches. ``Job``, ``StopReport`` and the rest are re-exported from here.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Sequence

from console.errors import JobError
from console.jobs.history import JobRecord
from console.jobs.models import JobKind, JobPlan, JobState, RankLaunch
from console.jobs.paths import new_job_id
from console.jobs.plan import ray as plan_ray
from console.jobs.plan.placement import select_hosts
from console.jobs.plan.planner import plan
from console.jobs.plan_json import plan_hosts
from console.jobs.spec import JobSpec, spec_with
from console.jobs.ssh import jobctl_reports, remote_ops, supervision
from console.jobs.ssh.control import DEFAULT_GRACE_S, WATCH_INTERVAL_S, Connections
from console.jobs.ssh.job import Job, JobEvent, JobFailure, ProcessInfo, StopReport
from console.jobs.ssh.watch import PS_FINISHERS, TAIL_LINES, JobWatch

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


# Kinds whose master port, when not given, is a free one the master host names.
FREE_PORT_KINDS = (JobKind.DDP, JobKind.PS, JobKind.RAY)


class JobRunner(JobWatch):
    """Starts, watches and stops jobs over a cluster's connections (see module doc)."""

    # -- launch --------------------------------------------------------------------------

    @functools.cached_property
    def specs(self) -> dict[str, JobSpec]:
        """The spec of each job this runner prepared: launch writes it into job.json."""
        return {}

    async def prepare(self, spec: JobSpec, *, job_id: str | None = None) -> JobPlan:
        """Plan ``spec``; without a master port (ddp, ps, ray), ask the master host for a
        free one first, so that the planner's port is one nobody listens on right now (for
        Ray the whole range it uses from there, ``plan_ray.check_ports``)."""
        job_id = job_id or new_job_id(spec.display_name)
        if spec.master_port is None and spec.kind in FREE_PORT_KINDS:
            hosts = select_hosts(spec, self.inventory)
            master = hosts[0]
            self.require_up([master.name], what=f"job {job_id}")
            span = plan_ray.port_count(len(hosts)) if spec.kind is JobKind.RAY else 1
            spec = spec_with(spec, master_port=await self.free_port(master.name, span))
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
        # The leader's supervisor first: the others connect to the port it listens on.
        job.supervised = True
        leader = supervision.supervised_hosts(plan)[0]
        secret = supervision.new_secret()
        outcomes: list[BaseException | int | None] = []
        try:
            port = await self._start_on(job, leader, by_host[leader], leader, None, secret)
            outcomes.append(port)
        except Exception as start_error:
            port = None
            outcomes.append(start_error)
        rest = [h for h in targets if h != leader]
        if port is not None:
            outcomes += await asyncio.gather(
                *(self._start_on(job, h, by_host[h], leader, port, secret) for h in rest),
                return_exceptions=True,
            )
        errors = [
            (h, o)
            for h, o in zip([leader, *rest], outcomes, strict=False)
            if isinstance(o, BaseException)
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

    async def _start_on(
        self,
        job: Job,
        host: str,
        launches: Sequence[RankLaunch],
        leader: str,
        leader_port: int | None,
        secret: str,
    ) -> int | None:
        """Start ``host``'s processes and (when it has any) its supervisor; returns the
        supervisor's port when ``host`` is the leader."""
        spec = self.specs.get(job.id)
        payload = json.loads(
            remote_ops.start_payload(
                job.plan,
                self._host(host),
                launches,
                created_at=job.started,
                spec=spec.model_dump(mode="json") if spec is not None else None,
            )
        )
        if launches:
            payload["supervisor"] = supervision.supervisor_spec(
                job.plan,
                host,
                leader=self._host(leader),
                leader_port=leader_port,
                secret=secret,
                grace_s=self.grace_s,
            )
        data = await self._jobctl(
            host, "start", {}, timeout=START_TIMEOUT_S, input=json.dumps(payload)
        )
        started = jobctl_reports.started(data)
        for name, pgid in started.pgids.items():
            info = job.processes.get((host, name))
            if info is not None:
                info.pgid = pgid
                info.running = True
        if started.supervisor_error:
            raise JobError(f"{host}: {started.supervisor_error}")
        return started.supervisor_port

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
        found = [
            (h, o)
            for h, o in zip(hosts, outcomes, strict=True)
            if isinstance(o, jobctl_reports.Inspected)
        ]
        for host, inspected in found:
            if inspected.supervisor is not None:
                # Known before the reports: a supervised job's policy runs on its hosts.
                job.supervised = True
                job.supervisors[host] = inspected.supervisor
        for host, inspected in found:
            for report in inspected.processes:
                await self._on_report(job, host, report)
        for host, inspected in found:
            if inspected.supervisor is not None and not job.finished:
                await self._on_supervisor(job, host, inspected.supervisor)
        if job.finished:
            return job
        if job.state is JobState.UNSUPERVISED:
            pass
        elif lost and not any(r.alive for r in job.supervisors.values()):
            reason = "; ".join(f"{h}: {e}" for h, e in lost.items())
            self._set_state(job, JobState.LOST, message=reason)
        else:
            # A supervisor that runs answers for the job, even with a host out of reach.
            self._set_state(job, JobState.RUNNING)
        if watch:
            self._watch(job, [h for h in hosts if h not in lost])
        return job

    async def _inspect(self, job: Job, host: str) -> jobctl_reports.Inspected:
        args = {
            "job_id": job.id,
            "job_dir": remote_ops.host_job_dir(job.plan, host),
            "names": [p.name for p in job.on_host(host)],
            "host": host,  # hosts sharing a home share job_dir: its supervisor's files
        }
        data = await self._jobctl(host, "inspect", args, timeout=20)
        return jobctl_reports.inspected(data)

    async def close(self) -> None:
        """Stop watching (the jobs keep running on their hosts)."""
        for job in self.jobs.values():
            for remote in list(job._remote.values()):
                remote.write_eof()
                remote.close()
            for task in job._watchers.values():
                task.cancel()
            await asyncio.gather(*job._watchers.values(), return_exceptions=True)
