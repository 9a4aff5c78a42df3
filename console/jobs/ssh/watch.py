"""Following a running job: one long-lived watcher per host reports its processes and
what the host's supervisor records.

The job's policy (fail-fast, the PS rule, lost hosts, a stop asked elsewhere) runs in
the host supervisors (``console/hostprogs/supervisor/program.py``); this side reads their
verdict (:mod:`console.jobs.ssh.supervision`) and kills nothing on its own while a
supervisor runs. A job without supervisors (started before they existed) gets the same
policy (``hostprogs/supervisor/policy.py``, one copy) applied here, stopping the rest
as the policy says; a job whose supervisors died reads ``unsupervised`` and is judged,
without stopping anything, once its processes have ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import replace

from console.errors import JobError, TransportError
from console.hostprogs.supervisor.policy import JobPolicy, ProcessEnded
from console.jobs.models import JobState
from console.jobs.ssh import remote_ops, supervision
from console.jobs.ssh.failure_lines import failed_rank
from console.jobs.ssh.failure_tail import read_failure_tail
from console.jobs.ssh.host_loss import HostLoss
from console.jobs.ssh.job import Job, JobEvent, JobFailure, ProcessInfo
from console.jobs.ssh.jobctl_reports import (
    JobctlReader,
    ProcessReport,
    SupervisorRecord,
    WatchDone,
    watch_record,
)

TAIL_LINES = 15
SEARCHED_LINES = 400  # per file, for the first error before the launcher's report
PS_FINISHERS = ("worker", "chief")  # roles whose success ends a ps job (the policy's)


class JobWatch(HostLoss):
    """Per-host watch loops; the supervisors' verdict, or the policy applied here (a lost
    host: :class:`HostLoss`, ``host_loss.py``)."""

    def _policy(self, job: Job) -> JobPolicy:
        if job.policy is None:
            job.policy = supervision.console_policy(job)
        return job.policy

    def _watch(self, job: Job, hosts: Iterable[str]) -> None:
        for host in hosts:
            if any(not p.ended for p in job.on_host(host)) or job.supervised:
                job._watchers[host] = asyncio.create_task(self._watch_host(job, host))

    async def _watch_host(self, job: Job, host: str) -> None:
        job_dir = remote_ops.host_job_dir(job.plan, host)
        while not job.finished:
            pending = [p.name for p in job.on_host(host) if not p.ended]
            if not pending and not job.supervised:
                return
            args = {
                "job_dir": job_dir,
                "names": pending,
                "interval": self.watch_interval_s,
                "host": host,  # hosts sharing a home share job_dir: its supervisor's files
            }
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
                    elif isinstance(record, SupervisorRecord):
                        await self._on_supervisor(job, host, record)
                    if isinstance(record, WatchDone) or job.finished:
                        break
            finally:
                job._remote.pop(host, None)
                remote.close()
            if job.finished:
                return
            if all(p.ended for p in job.on_host(host)) and not self._supervisor_runs(job, host):
                return
            # The stream ended early: the host went away, or only the channel did.
            if not await self._answers(host):
                reason = self._conn(host).status.reason or "it no longer answers over ssh"
                await self._host_lost(job, host, reason)
                return
            await asyncio.sleep(0.5)

    @staticmethod
    def _supervisor_runs(job: Job, host: str) -> bool:
        record = job.supervisors.get(host)
        return record is not None and record.alive and not record.final

    async def _tell_ended(self, job: Job) -> None:
        """Ends this console saw on hosts whose supervisor is dead, told to the leader
        (``jobctl host-ended``): nothing else reaches it, and it would wait on those
        processes for ever. Every end seen on such a host so far, each time one is new."""
        record = next((r for r in job.supervisors.values() if r.leader), None)
        if record is None or not record.alive or record.final:
            return  # no leader waits (it ended, or the followers judge alone)
        leader: str = record.host
        for host in supervision.unsupervised_hosts(job.supervisors):
            ended = [p for p in job.on_host(host) if p.ended]
            if host == leader or not {(host, p.name) for p in ended} - job.ends_told:
                continue
            ends = [
                {
                    "name": p.name,
                    "exit_code": p.exit_status,
                    "at": p.ended_at if p.ended_at is not None else time.time(),
                    "stop_requested": p.note == "stopped",
                }
                for p in ended
            ]
            args = {"job_dir": remote_ops.host_job_dir(job.plan, leader), "host": host}
            with contextlib.suppress(TransportError, JobError):
                await self._jobctl(leader, "host-ended", dict(args, ends=ends), timeout=10)
                job.ends_told |= {(host, p.name) for p in ended}

    async def _on_supervisor(self, job: Job, host: str, record: SupervisorRecord) -> None:
        job.supervised = True
        job.supervisors[host] = record
        if job.finished or (job.stopping and job.lost_hosts):
            return  # _await_verdict's own stop: it finishes the job
        found = supervision.verdict(job, job.supervisors)
        if found is not None:
            if found.failure is not None:
                job.failure = found.failure
            elif found.state is JobState.FAILED and job.failure is None and job.lost_hosts:
                lost, why = next(iter(job.lost_hosts.items()))
                job.failure = JobFailure(lost, "", (), None, f"connection lost ({why})")
            leader = self._leader_lost(job)
            if found.state is JobState.FAILED and leader is not None:
                job.failure = leader  # the followers' ranks lost its rendezvous: a consequence
            if found.state is JobState.STOPPED and not job.stopping:
                job.stopped_elsewhere = True
            self._ended_as_recorded(job, job.supervisors.values())
            failure = job.failure
            info = job.processes.get((failure.host, failure.process)) if failure else None
            if failure is not None and failure.process and not failure.first_error:
                # The supervisor found no cause in the lines it read: search over ssh
                # as for a job without supervisors (the same rule, more of the log,
                # every host's files).
                if info is not None and failure.exit_status is not None:
                    info.exit_status = failure.exit_status
                    fresh = await self._failure(job, info)
                    job.failure = replace(
                        fresh,
                        ranks=failure.ranks if len(failure.ranks) == 1 else fresh.ranks,
                        reason=failure.reason or info.note,
                    )
            elif failure is not None and failure.process:
                job.failure = await self._with_other_hosts(job, failure)
            self._finish(job, found.state)
            return
        dead = supervision.unsupervised_hosts(job.supervisors)
        if dead:
            message = f"{', '.join(dead)}: no supervisor runs"
            self._set_state(job, JobState.UNSUPERVISED, message=message)
            if supervision.unsupervised(job.supervisors):
                await self._judge_unsupervised(job)
            else:
                await self._tell_ended(job)
        elif job.state is JobState.UNSUPERVISED or job.state is JobState.STARTING:
            self._set_state(job, JobState.RUNNING)
        if record.state == "hung":
            job._publish(JobEvent(job.id, job.state, host, message="hung"))

    @staticmethod
    def _ended_as_recorded(job: Job, records: Iterable[SupervisorRecord]) -> None:
        """Processes whose end the supervisors recorded before this watch saw it."""
        for record in records:
            for name, proc in record.processes.items():
                host = str(proc.get("host") or record.host)
                info = job.processes.get((host, name.rpartition("/")[2]))
                if info is None or info.ended or proc.get("ended_at") is None:
                    continue
                info.ended, info.running = True, False
                code = proc.get("exit_code")
                info.exit_status = code if isinstance(code, int) else None
                info.ended_at = float(proc["ended_at"])

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
        policy = self._policy(job)
        before = policy.first_failure
        stop_now = policy.feed(
            ProcessEnded(
                host,
                info.name,
                info.exit_status,
                info.ended_at if info.ended_at is not None else time.time(),
                stop_requested=report.stop_requested,
            )
        )
        if job.supervised:
            if supervision.unsupervised(job.supervisors):
                await self._judge_unsupervised(job)
            else:
                await self._tell_ended(job)
            return  # the supervisors decide
        await self._decide(job, info, stop_now, policy.first_failure is not before)

    async def _judge_unsupervised(self, job: Job) -> None:
        """No supervisor: nothing is stopped, the job is judged once everything ended."""
        policy = self._policy(job)
        if policy.first_failure is not None and job.failure is None:
            failed = job.processes.get(
                (policy.first_failure.host, policy.first_failure.process or "")
            )
            if failed is not None:
                job.failure = await self._failure(job, failed)
        if all(p.ended for p in job.processes.values()) and not job.finished:
            state = policy.verdict or (JobState.FAILED if job.failure else JobState.SUCCEEDED)
            self._finish(job, JobState(state))

    async def _decide(self, job: Job, info: ProcessInfo, stop_now: bool, new_cause: bool) -> None:
        """A job without supervisors: the policy's orders carried out from here."""
        if job.finished:
            return
        policy = self._policy(job)
        if new_cause and not job.stopped_elsewhere:
            job.failure = await self._failure(job, info)
        if job.stopping:
            return
        if stop_now and policy.verdict is not None:
            if policy.verdict == JobState.STOPPED.value:
                job.stopped_elsewhere = True
                if not all(p.ended for p in job.processes.values()):
                    return  # whoever asked is stopping it; it ends once all have ended
            else:
                await self._finish_by_stopping(job, JobState(policy.verdict))
                return
        if all(p.ended for p in job.processes.values()):
            state = policy.verdict or (JobState.FAILED if job.failure else JobState.SUCCEEDED)
            self._finish(job, JobState(state))

    async def _finish_by_stopping(self, job: Job, state: JobState) -> None:
        job.stopping = True
        job.stop_report = await self._stop_everywhere(job, grace_s=self.grace_s)
        self._finish(job, state)

    async def _failure(self, job: Job, info: ProcessInfo) -> JobFailure:
        """The failed process's last lines and cause, each file read on the host that
        holds it (an MPI rank's stderr lives where the rank ran)."""
        by_host = self._tail_paths(job, info)
        read = await read_failure_tail(
            self._conn, by_host, info.host, lines=TAIL_LINES, searched=SEARCHED_LINES
        )
        named = failed_rank([*read.cause, *read.tail])
        return JobFailure(
            info.host,
            info.name,
            (named,) if named is not None else info.launch.ranks,
            info.exit_status,
            info.note,
            read.tail,
            read.cause,
            info.ended_at,
        )

    @staticmethod
    def _tail_paths(job: Job, info: ProcessInfo) -> dict[str, list[str]]:
        job_dir = remote_ops.host_job_dir(job.plan, info.host)
        return remote_ops.tail_paths_by_host(info.launch, job_dir)

    async def _with_other_hosts(self, job: Job, failure: JobFailure) -> JobFailure:
        """The supervisor read the failed process's files on its own host; the files its
        ranks wrote on other hosts (MPI, Horovod) are read here and added."""
        info = job.processes.get((failure.host, failure.process))
        if info is None:
            return failure
        others = {h: p for h, p in self._tail_paths(job, info).items() if h != failure.host}
        if not others:
            return failure
        read = await read_failure_tail(
            self._conn, others, failure.host, lines=TAIL_LINES, searched=SEARCHED_LINES
        )
        if not read.tail and not read.cause:
            return failure
        # A rank's error on another host came before the launcher's report: it is the cause.
        named = failed_rank([*failure.tail, *read.tail])
        ranks = (named,) if named is not None and len(failure.ranks) != 1 else failure.ranks
        # A rank's error on another host came before its launcher's report: the cause.
        cause = read.cause or failure.first_error
        return replace(failure, ranks=ranks, tail=failure.tail + read.tail, first_error=cause)
