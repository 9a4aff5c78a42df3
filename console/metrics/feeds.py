"""What keeps a :class:`MetricsSource` current: the samplers' batches, job sweeps, and
the step parser over running jobs' logs. Scrapes only read; these are the only writers.

- views: every ``ClusterMonitor`` batch, as it comes (the samplers already stream);
- jobs: every ``jobs_every_s`` the hosts' job directories are read into the history
  (``jobs/report/discover.py``, as ``distconsole jobs`` does) and the inventory's
  unfinished jobs plus the newest finished ones are exported;
- steps: one follower per running job with a plan (from the end of its files: the
  endpoint exports what the ranks print from now on), fed to a ``StepTracker``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from console.errors import ConsoleError
from console.inventory import Inventory
from console.jobs.history import JobHistory, JobRecord
from console.jobs.models import JobState
from console.jobs.report.discover import discover
from console.jobs.report.slow_ranks import rank_pace
from console.logs.follower import HostLogFollower, follow_hosts
from console.logs.steps import StepTracker
from console.logs.targets import targets_from_plan
from console.metrics.source import JobFigures, MetricsSource
from console.probe.monitor import ClusterMonitor
from console.transport.pool import ClusterConnections

JOBS_EVERY_S = 30.0
FINISHED_KEPT = 20  # finished jobs exported besides the unfinished ones
FOLLOWED_STATES = (JobState.STARTING, JobState.RUNNING, JobState.UNSUPERVISED)


async def feed_views(monitor: ClusterMonitor, source: MetricsSource) -> None:
    async for batch in monitor.updates():
        source.update_views(batch)


def exported(records: Sequence[JobRecord]) -> list[JobRecord]:
    """Unfinished jobs, and the ``FINISHED_KEPT`` newest finished ones (records come
    newest first)."""
    finished = [r for r in records if r.state.finished][:FINISHED_KEPT]
    return [r for r in records if not r.state.finished or r in finished]


def job_figures(record: JobRecord) -> JobFigures:
    restarts = int((record.host_view or {}).get("restarts") or 0)
    pace = tuple(rank_pace(record.host_view)) if record.state is JobState.RUNNING else ()
    return JobFigures(record.id, record.name, record.kind.value, record.state.value, restarts, pace)


async def follow_steps(pool: ClusterConnections, record: JobRecord, source: MetricsSource) -> None:
    names = {h.name for h in pool.hosts}
    targets = targets_from_plan(
        record.plan, [n for n in record.plan.hosts_involved or record.hosts if n in names]
    )
    followers = [HostLogFollower(pool[t.host], t, follow=True, since_start=False) for t in targets]
    tracker = StepTracker()
    async for batch in follow_hosts(followers):
        if batch.lines:
            tracker.feed(batch.lines)
            source.set_ranks(record.id, tracker.ranks())


class JobFeed:
    """The job sweeps, and a step follower per running job."""

    def __init__(
        self,
        pool: ClusterConnections,
        inventory: Inventory,
        history: JobHistory,
        source: MetricsSource,
        *,
        every_s: float = JOBS_EVERY_S,
    ) -> None:
        self.pool = pool
        self.inventory = inventory
        self.history = history
        self.source = source
        self.every_s = every_s
        self.followers: dict[str, asyncio.Task[None]] = {}
        self.problem: str | None = None  # why the last sweep or a follower failed

    async def run(self) -> None:
        """Sweep every ``every_s``; a sweep that fails (a host's scan, the history) is
        kept in ``problem`` and tried again next time, the last figures staying."""
        try:
            while True:
                try:
                    await self.sweep()
                    self.problem = None
                except ConsoleError as exc:
                    self.problem = str(exc)
                await asyncio.sleep(self.every_s)
        finally:
            await self.close()

    async def sweep(self) -> None:
        await discover(self.pool, self.inventory, self.history)
        records = await asyncio.to_thread(self.history.records, inventory=self.inventory.path)
        shown = exported(records)
        self.source.set_jobs(job_figures(r) for r in shown)
        running = {r.id: r for r in shown if r.state in FOLLOWED_STATES}
        for job_id in [j for j in self.followers if j not in running]:
            self.followers.pop(job_id).cancel()
            self.source.set_ranks(job_id, ())  # ended: no steps/s frozen at its last value
        for job_id, record in running.items():
            task = self.followers.get(job_id)
            if task is not None and task.done() and not task.cancelled():
                failed = task.exception()  # a follower's bug: say it, start it again
                self.problem = (
                    f"{job_id}: following its logs failed: {failed!r}" if failed else None
                )
            if task is None or task.done():
                self.followers[job_id] = asyncio.create_task(
                    follow_steps(self.pool, record, self.source), name=f"metrics:steps:{job_id}"
                )

    async def close(self) -> None:
        tasks = list(self.followers.values())
        self.followers.clear()
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)
