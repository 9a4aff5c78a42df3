"""Following a running job: one long-lived watcher per host reports processes as they
end, and the job's policy decides what that means: fail-fast, the PS rule (ps tasks are
stopped once every worker and the chief succeeded), lost hosts."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from console.errors import TransportError
from console.jobs import remote_ops
from console.jobs.control import JobControl
from console.jobs.failure_lines import first_error
from console.jobs.job import Job, JobEvent, JobFailure, ProcessInfo
from console.jobs.jobctl_reports import JobctlReader, ProcessReport, WatchDone, watch_record
from console.jobs.models import JobKind, JobState

TAIL_LINES = 15
SEARCHED_LINES = 400  # per file, for the first error before the launcher's report
PS_FINISHERS = ("worker", "chief")  # roles whose success ends a ps job


class JobWatch(JobControl):
    """Per-host watch loops and the policy applied to what they report."""

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
            reader = JobctlReader(host)
            try:
                async for line in remote.lines():
                    raw = reader.read(line)
                    if raw is None:
                        continue
                    record = watch_record(raw)
                    if isinstance(record, ProcessReport):
                        await self._on_report(job, host, record)
                    if isinstance(record, WatchDone) or job.finished:
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

    async def _on_report(self, job: Job, host: str, report: ProcessReport) -> None:
        info = job.processes.get((host, report.name))
        if info is None:
            return
        if report.pgid is not None:
            info.pgid = report.pgid
        if report.running:
            if not info.running:
                info.running = True
                job._publish(JobEvent(job.id, job.state, host, info.name, message="running"))
            return
        if info.ended:
            return
        info.ended = True
        info.running = False
        info.exit_status = report.exit_status
        info.ended_at = report.ended_at
        if report.stop_requested:
            info.note = "stopped"
            if not job.stopping:  # not this console's own stop
                job.stopped_elsewhere = True
        elif report.missing:
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
            if _failed_earlier(info, job.failure) and not job.stopped_elsewhere:
                # Reported later but ended first: the other failure was its consequence
                # (a peer's collective broke), so this one is the job's cause.
                job.failure = await self._failure(job, info)
            return
        if job.stopped_elsewhere:
            if everything_ended:
                self._finish(job, JobState.STOPPED)
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
        conn = self._conn(info.host)
        cause: tuple[str, ...] = ()
        try:
            result = await conn.run(remote_ops.tail_command(paths, TAIL_LINES), timeout=10)
            tail = tuple(result.stdout.splitlines()[-2 * TAIL_LINES :])
            searched = await conn.run(remote_ops.tail_command(paths, SEARCHED_LINES), timeout=10)
            cause = first_error(searched.stdout.splitlines())
        except TransportError as exc:
            tail = (f"  (could not read the log: {exc})",)
        if set(cause) <= set(tail):
            cause = ()  # the last lines already show it
        return JobFailure(
            info.host,
            info.name,
            info.launch.ranks,
            info.exit_status,
            info.note,
            tail,
            cause,
            info.ended_at,
        )


def _failed_earlier(info: ProcessInfo, failure: JobFailure | None) -> bool:
    if failure is None or info.exit_status in (0, None) or info.note == "stopped":
        return False
    if info.ended_at is None or failure.ended_at is None:
        return False
    return info.ended_at < failure.ended_at
