"""A host a watched job lost: what the console does when a host stops answering.

A job with supervisors: the others are told (``jobctl host-lost``) and their verdict is
awaited; without one in time, what is reachable is stopped here. A job without
supervisors is failed as lost (fail-fast stops the rest). :class:`HostLoss` is the part of
:class:`console.jobs.ssh.watch.JobWatch` that does this.
"""

from __future__ import annotations

import asyncio
import contextlib

from console.errors import JobError, TransportError
from console.jobs.models import JobState
from console.jobs.ssh import remote_ops, supervision
from console.jobs.ssh.control import JobControl
from console.jobs.ssh.job import Job, JobEvent, JobFailure
from console.jobs.ssh.supervision import POLICY_SETTLE_S, failure_of


class HostLoss(JobControl):
    """Lost hosts: telling the others, awaiting the supervisors' verdict, the leader's loss."""

    async def _answers(self, host: str) -> bool:
        try:
            result = await self._conn(host).run("true", timeout=5)
        except TransportError:
            return False
        return result.ok

    async def _host_lost(self, job: Job, host: str, reason: str) -> None:
        if job.finished or job.stopping:
            return
        message = f"{host}: connection lost ({reason})"
        job.lost_hosts[host] = reason
        if job.supervised:
            # The supervisors notice a silent host themselves, stop the rest and record
            # the verdict; wait for it on the hosts still reachable. A host killed whole
            # on a live kernel closes its supervisor's connection, which alone reads
            # "unsupervised": tell the others this host is lost.
            job._publish(JobEvent(job.id, job.state, host, message=message, host_lost=True))
            await self._tell_lost(job, host, reason)
            job._watchers[f"{host}-lost"] = asyncio.create_task(self._await_verdict(job, host))
            return
        if job.failure is None:
            job.failure = JobFailure(host, "", (), None, f"connection lost ({reason})")
        self._set_state(job, JobState.LOST, message=message)
        if job.plan.fail_fast:
            # The other ranks would wait in a collective for the lost ones forever.
            job.stopping = True
            job.stop_report = await self._stop_everywhere(job, grace_s=self.grace_s)
            self._finish(job, JobState.LOST)

    async def _await_verdict(self, job: Job, host: str) -> None:
        """The supervisors' verdict after a host was lost; without one in time (every
        supervisor gone too), stop what is reachable and record the loss here.

        An elastic job (``--min-hosts``) may go on without the host for as long as it
        trains: while its leader's supervisor runs, that leader decides (a scale-down, or
        the job's failure below the floor), however long it takes."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(job._done.wait()), self._verdict_wait_s())
            if job.finished:
                return
            if not (job.plan.min_hosts and self._leader_decides(job, host)):
                break
        reason = job.lost_hosts.get(host, "")
        job.failure = job.failure or JobFailure(host, "", (), None, f"connection lost ({reason})")
        job.stopping = True
        job.stop_report = await self._stop_everywhere(job, grace_s=self.grace_s)
        self._finish(job, JobState.FAILED)

    @staticmethod
    def _leader_decides(job: Job, lost: str) -> bool:
        """The leader's supervisor runs on a host other than ``lost`` and has not ended."""
        leader = next((r for r in job.supervisors.values() if r.leader), None)
        return leader is not None and leader.host != lost and leader.alive and not leader.final

    async def _tell_lost(self, job: Job, lost: str, reason: str) -> None:
        """``jobctl host-lost`` on every other host of the job (best effort: a host
        this console cannot reach either learns nothing from it)."""

        async def tell(host: str) -> None:
            args = {"job_dir": remote_ops.host_job_dir(job.plan, host), "host": lost}
            with contextlib.suppress(TransportError, JobError):
                await self._jobctl(host, "host-lost", dict(args, why=reason), timeout=10)

        others = [h for h in job.plan.job_dirs if h != lost and h not in job.lost_hosts]
        await asyncio.gather(*(tell(h) for h in others))

    def _verdict_wait_s(self) -> float:
        return supervision.SILENCE_S + self.grace_s + POLICY_SETTLE_S

    @staticmethod
    def _leader_lost(job: Job) -> JobFailure | None:
        """The leader's host, when this console lost it and the followers judged alone
        (its supervisor's connection had closed): it is the job's cause, whatever the
        followers' own ranks then failed with."""
        leader = supervision.supervised_hosts(job.plan)[:1]
        if not leader or leader[0] not in job.lost_hosts:
            return None
        alone = [
            r
            for r in job.supervisors.values()
            if not r.leader
            and r.final
            and (
                leader[0] in r.unsupervised
                or (
                    r.first_failure is not None
                    and r.first_failure.host == leader[0]
                    and not r.first_failure.process
                )
            )
        ]
        if not alone:
            return None
        then = failure_of(job, alone[0])
        followed = f"; then {then.describe().splitlines()[0]}" if then is not None else ""
        why = job.lost_hosts[leader[0]]
        return JobFailure(
            leader[0],
            "",
            (),
            None,
            f"host lost (connection lost: {why}); the rendezvous it held went with it{followed}",
        )
