"""Start, watch, stop and re-attach to jobs on their hosts.

Each planned process starts detached (its own session and process group) through one
``run()`` per host, with its output in files under the job directory and its exit
status and process group recorded there; so the job outlives the console, and any
later console can re-attach from the history row and those files. One long-lived
watcher per host reports processes as they end. Policy lives here: fail-fast, the PS
rule (ps tasks are stopped once every worker and the chief succeeded), lost hosts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from console.errors import JobError, TransportError
from console.inventory import Host, Inventory
from console.jobs import remote_ops
from console.jobs.history import JobHistory, JobRecord, plan_hosts
from console.jobs.models import JobKind, JobPlan, JobState, RankLaunch
from console.jobs.paths import new_job_id
from console.jobs.placement import select_hosts
from console.jobs.planner import plan
from console.jobs.spec import JobSpec, spec_with
from console.transport.base import HostConnection, HostState

DEFAULT_GRACE_S = 10.0
WATCH_INTERVAL_S = 0.2
START_TIMEOUT_S = 60.0
TAIL_LINES = 15
PS_FINISHERS = ("worker", "chief")  # roles whose success ends a ps job


class Connections(Protocol):
    """What the runner needs from :class:`console.transport.pool.ClusterConnections`."""

    def __getitem__(self, name: str) -> HostConnection: ...


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


@dataclass(frozen=True, slots=True)
class JobFailure:
    host: str
    process: str
    ranks: tuple[int, ...]
    exit_status: int | None
    reason: str
    tail: tuple[str, ...] = ()

    def describe(self) -> str:
        who = f"{self.host} {self.process}"
        if self.ranks:
            first, last = self.ranks[0], self.ranks[-1]
            who += f" (rank {first})" if first == last else f" (ranks {first}-{last})"
        what = f"exit status {self.exit_status}" if self.exit_status is not None else self.reason
        lines = [f"{who} failed: {what}"]
        if self.exit_status is not None and self.reason:
            lines[0] += f" ({self.reason})"
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
        self.stopping = False
        self.processes: dict[tuple[str, str], ProcessInfo] = {
            key: ProcessInfo(key[0], key[1], launch)
            for key, launch in remote_ops.process_names(plan).items()
        }
        self._done = asyncio.Event()
        self._queues: list[asyncio.Queue[JobEvent | None]] = []
        self._watchers: dict[str, asyncio.Task[None]] = {}
        self._remote: dict[str, Any] = {}

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


class JobRunner:
    """Starts, watches and stops jobs over a cluster's connections (see module doc)."""

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
            if status.state is not HostState.UP:
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
        for line in reversed(result.stdout.splitlines()):
            if line.startswith("{"):
                data: dict[str, Any] = json.loads(line)
                return data
        raise JobError(f"{host}: job helper '{op}' printed no result: {result.stdout[-300:]!r}")

    async def free_port(self, host: str) -> int:
        """A TCP port no process on ``host`` listens on right now."""
        data = await self._jobctl(host, "free-port", {}, timeout=20)
        return int(data["port"])

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

    # -- launch --------------------------------------------------------------------------

    async def prepare(self, spec: JobSpec, *, job_id: str | None = None) -> JobPlan:
        """Plan ``spec``; without a master port (ddp, ps), ask the master host for a free
        one first, so that the planner's port is one nobody listens on right now."""
        job_id = job_id or new_job_id(spec.display_name)
        if spec.master_port is None and spec.kind in (JobKind.DDP, JobKind.PS):
            master = select_hosts(spec, self.inventory)[0]
            self.require_up([master.name], what=f"job {job_id}")
            spec = spec_with(spec, master_port=await self.free_port(master.name))
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
        payload = remote_ops.start_payload(job.plan, self._host(host), launches)
        data = await self._jobctl(host, "start", {}, timeout=START_TIMEOUT_S, input=payload)
        for name, pgid in data.get("pgids", {}).items():
            info = job.processes.get((host, name))
            if info is not None:
                info.pgid = int(pgid)
                info.running = True

    # -- watch ---------------------------------------------------------------------------

    def _watch(self, job: Job, hosts: Iterable[str]) -> None:
        for host in hosts:
            if any(not p.ended for p in job.on_host(host)):
                job._watchers[host] = asyncio.create_task(self._watch_host(job, host))

    async def _watch_host(self, job: Job, host: str) -> None:
        job_dir = remote_ops.host_job_dir(job.plan, host)
        while not job.finished:
            pending = [p.name for p in job.on_host(host) if not p.ended]
            if not pending:
                return
            args = {"job_dir": job_dir, "names": pending, "interval": self.watch_interval_s}
            command = remote_ops.jobctl_command(self._host(host), "watch", args)
            try:
                remote = await self._conn(host).start(command)
            except TransportError as exc:
                await self._host_lost(job, host, str(exc))
                return
            job._remote[host] = remote
            try:
                async for line in remote.lines():
                    if not line.startswith("{"):
                        continue
                    report = json.loads(line)
                    if "proc" in report:
                        await self._on_report(job, host, report)
                    if report.get("done") or job.finished:
                        break
            finally:
                job._remote.pop(host, None)
                remote.close()
            if job.finished or all(p.ended for p in job.on_host(host)):
                return
            # The stream ended early: the host went away, or only the channel did.
            if not await self._answers(host):
                await self._host_lost(job, host, self._conn(host).status.reason)
                return
            await asyncio.sleep(0.5)

    async def _answers(self, host: str) -> bool:
        try:
            result = await self._conn(host).run("true", timeout=5)
        except TransportError:
            return False
        return result.ok

    async def _host_lost(self, job: Job, host: str, reason: str) -> None:
        if job.finished or job.stopping:
            return
        if job.failure is None:
            job.failure = JobFailure(host, "host", (), None, f"{host} went away: {reason}")
        self._set_state(job, JobState.LOST, message=f"{host} went away: {reason}")
        if job.plan.fail_fast:
            # The other ranks would wait in a collective for the lost ones forever.
            job.stopping = True
            job.stop_report = await self._stop_everywhere(job, grace_s=self.grace_s)
            self._finish(job, JobState.LOST)

    async def _on_report(self, job: Job, host: str, report: dict[str, Any]) -> None:
        info = job.processes.get((host, str(report["proc"])))
        if info is None:
            return
        if report.get("pgid") is not None:
            info.pgid = int(report["pgid"])
        if report.get("running"):
            if not info.running:
                info.running = True
                job._publish(JobEvent(job.id, job.state, host, info.name, message="running"))
            return
        if info.ended:
            return
        info.ended = True
        info.running = False
        status = report.get("exit")
        info.exit_status = None if status is None else int(status)
        if report.get("missing"):
            info.note = "never started (no process group recorded)"
        elif info.exit_status is None:
            info.note = "ended without recording an exit status (killed?)"
        job._publish(
            JobEvent(job.id, job.state, host, info.name, info.exit_status, message="ended")
        )
        await self._decide(job, host, info)

    async def _decide(self, job: Job, host: str, info: ProcessInfo) -> None:
        if job.finished:
            return
        everything_ended = all(p.ended for p in job.processes.values())
        if job.stopping:
            return
        if info.exit_status != 0 and job.failure is None:
            job.failure = await self._failure(job, info)
            if job.plan.fail_fast:
                await self._finish_by_stopping(job, JobState.FAILED)
                return
        if job.plan.kind is JobKind.PS and job.failure is None:
            finishers = [p for p in job.processes.values() if p.launch.role in PS_FINISHERS]
            if finishers and all(p.ended and p.exit_status == 0 for p in finishers):
                # Parameter servers never exit on their own once training is over.
                await self._finish_by_stopping(job, JobState.SUCCEEDED)
                return
        if everything_ended:
            self._finish(job, JobState.FAILED if job.failure else JobState.SUCCEEDED)

    async def _finish_by_stopping(self, job: Job, state: JobState) -> None:
        job.stopping = True
        job.stop_report = await self._stop_everywhere(job, grace_s=self.grace_s)
        self._finish(job, state)

    async def _failure(self, job: Job, info: ProcessInfo) -> JobFailure:
        job_dir = remote_ops.host_job_dir(job.plan, info.host)
        paths = remote_ops.tail_paths(info.launch, job_dir)
        try:
            result = await self._conn(info.host).run(
                remote_ops.tail_command(paths, TAIL_LINES), timeout=10
            )
            tail = tuple(result.stdout.splitlines()[-2 * TAIL_LINES :])
        except TransportError as exc:
            tail = (f"  (could not read the log: {exc})",)
        return JobFailure(
            info.host, info.name, info.launch.ranks, info.exit_status, info.note, tail
        )

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
        data = await self._jobctl(host, "stop", args, timeout=grace_s + 30)
        for report in data.get("processes", []):
            info = job.processes.get((host, str(report["proc"])))
            if info is not None and not info.ended:
                info.ended, info.running = True, False
                status = report.get("exit")
                info.exit_status = None if status is None else int(status)
                info.note = "stopped"
        return tuple(f"pid {p['pid']}: {p['cmd']}" for p in data.get("remaining", []))

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

    async def _inspect(self, job: Job, host: str) -> list[dict[str, Any]]:
        args = {
            "job_id": job.id,
            "job_dir": remote_ops.host_job_dir(job.plan, host),
            "names": [p.name for p in job.on_host(host)],
        }
        data = await self._jobctl(host, "inspect", args, timeout=20)
        reports: list[dict[str, Any]] = data.get("processes", [])
        return reports

    async def close(self) -> None:
        """Stop watching (the jobs keep running on their hosts)."""
        for job in self.jobs.values():
            for remote in list(job._remote.values()):
                remote.write_eof()
                remote.close()
            for task in job._watchers.values():
                task.cancel()
            await asyncio.gather(*job._watchers.values(), return_exceptions=True)
