"""The app's feeds: the loops that read the core's async iterators into inboxes.

Each loop runs as a Textual worker started on the app (workers belong to a DOM node, so
the app's ``on_worker_state_changed`` still hears of a failed one, by group:
``connections`` for host statuses, GPU views and the Slurm queue, ``jobs`` for the job
rows). A loop only ``put``s into its inbox; the app takes each batch, writes the store
and hands the changed part to screens. The loops also fill in ``Services``'
``connections``, ``monitor`` and ``jobs`` as each comes to exist, and :meth:`close`
closes them when the app unmounts.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from textual.app import App

from console.transport.base import HostStatus
from console.ui.feeds import ConnectionsFactory, HostStatusSource
from console.ui.inbox import Inbox
from console.ui.jobs_service import JobRow, JobsService
from console.ui.messages import (
    HostStatusesArrived,
    HostViewsArrived,
    JobRowsArrived,
    SlurmOccupancyArrived,
)
from console.ui.overview import count
from console.ui.services import Services

if TYPE_CHECKING:
    from console.jobs.slurm.queue import SlurmJobOnNode
    from console.metrics.endpoint import MetricsEndpoint
    from console.probe.models import HostView
    from console.transport.forward import PortForwards


def port_forwards(connections: HostStatusSource) -> PortForwards | None:
    """Forwards over the real pool's connections (none in views without them)."""
    from console.transport.forward import PortForwards
    from console.transport.pool import ClusterConnections

    return PortForwards(connections) if isinstance(connections, ClusterConnections) else None


class AppFeeds:
    """The worker loops of one app, and the inboxes they fill (posting to that app)."""

    def __init__(self, app: App[Any], services: Services) -> None:
        self._app = app
        self._services = services
        self.statuses_inbox: Inbox[HostStatus] = Inbox(app, HostStatusesArrived)
        self.views_inbox: Inbox[dict[str, HostView]] = Inbox(app, HostViewsArrived)
        self.jobs_inbox: Inbox[list[JobRow]] = Inbox(app, JobRowsArrived)
        self.slurm_inbox: Inbox[dict[str, tuple[SlurmJobOnNode, ...]]] = Inbox(
            app, SlurmOccupancyArrived
        )
        # Every host sampled once (or known not to be): the jobs sweeps may start.
        self.hosts_sampled = asyncio.Event()
        self.metrics: MetricsEndpoint | None = None  # --metrics-listen's endpoint

    def start(self, factory: ConnectionsFactory) -> None:
        """Connect to the cluster; the other feeds start once the connections exist."""
        self._app.run_worker(
            self._follow_host_statuses(factory),
            name="host-statuses",
            group="connections",
            exit_on_error=False,
        )

    async def _follow_host_statuses(self, factory: ConnectionsFactory) -> None:
        connections = factory(self._services.inventory)
        self._services.connections = connections
        await connections.start()
        self._services.forwards = port_forwards(connections)
        self._start_metrics()
        self._app.run_worker(
            self._attach_jobs(connections), group="connections", exit_on_error=False
        )
        interval = self._services.settings.monitor_interval_s
        if interval is not None:
            self._app.run_worker(
                self._follow_gpu_views(connections, interval),
                name="gpu-views",
                group="connections",
                exit_on_error=False,
            )
        if self._services.inventory.slurm is not None:
            self._app.run_worker(
                self._follow_slurm(connections),
                name="slurm-queue",
                group="connections",
                exit_on_error=False,
            )
        async for status in connections.subscribe():
            self.statuses_inbox.put(status)

    async def _follow_slurm(self, connections: HostStatusSource) -> None:
        from console.jobs.slurm.queue import SlurmQueuePoller, with_console_jobs
        from console.transport.pool import ClusterConnections

        if not isinstance(connections, ClusterConnections):
            return
        poller = SlurmQueuePoller(connections, self._services.inventory)
        async for found in poller.updates():
            occupancy = with_console_jobs(found, await asyncio.to_thread(self._slurm_launched))
            self.slurm_inbox.put(occupancy)
            if self._services.monitor is not None:  # nodes without SSH: sampled via srun
                self._services.monitor.follow_slurm(occupancy, poller.login.name)

    def _slurm_launched(self) -> dict[str, str]:
        """Slurm id -> distconsole job id of the jobs this console launched through
        Slurm (a job counts once: under its own id, not again as 'slurm N')."""
        import sqlite3

        from console.errors import JobError
        from console.jobs.slurm.store import SlurmStore

        jobs = self._services.jobs
        if jobs is None or not jobs.history.path.exists():
            return {}
        try:
            return {r.slurm_id: r.id for r in SlurmStore(jobs.history.path).all().values()}
        except (JobError, OSError, sqlite3.Error):  # a busy history: names stay Slurm's
            return {}

    async def _follow_gpu_views(self, connections: HostStatusSource, interval: float) -> None:
        from console.probe.monitor import ClusterMonitor
        from console.transport.pool import ClusterConnections

        if not isinstance(connections, ClusterConnections):
            return  # samplers run over the real pool's connections only
        monitor = ClusterMonitor(connections, interval=interval)
        self._services.monitor = monitor
        async for batch in monitor.updates():
            self.views_inbox.put(batch)
            if self.metrics is not None:
                self.metrics.source.update_views(batch)
            if not self.hosts_sampled.is_set() and all(
                m.settled for m in monitor.monitors.values()
            ):
                self.hosts_sampled.set()

    async def _attach_jobs(self, connections: HostStatusSource) -> None:
        from console.transport.pool import ClusterConnections

        if not isinstance(connections, ClusterConnections):
            return
        sampled = (
            self.hosts_sampled if self._services.settings.monitor_interval_s is not None else None
        )
        jobs = JobsService(
            connections,
            self._services.inventory,
            settings=self._services.settings,
            hosts_sampled=sampled,
        )
        self._services.jobs = jobs
        self._app.run_worker(
            self._follow_job_rows(jobs), name="job-rows", group="jobs", exit_on_error=False
        )
        # Jobs started by an earlier console keep running on their hosts: follow them again.
        await connections.wait_settled()
        attached = await jobs.attach_unfinished()
        # The demo's own job was started a moment ago for this console: its startup
        # notice already says so, and "re-attached" would say a console lost it.
        earlier = [job for job in attached if job.id not in self._services.started_here]
        if earlier:
            self._app.notify(
                f"Re-attached to {count(len(earlier), 'running job')} started earlier", timeout=5
            )

    async def _follow_job_rows(self, jobs: JobsService) -> None:
        from console.metrics.source import JobFigures

        exported: dict[str, JobFigures] = {}
        async for rows in jobs.row_updates():
            self.jobs_inbox.put(rows)
            if self.metrics is not None:  # rows come as changes: the endpoint gets all
                exported.update(
                    (r.id, JobFigures(r.id, r.name, r.kind, r.state.value, r.restarts, r.rank_pace))
                    for r in rows
                )
                self.metrics.source.set_jobs(exported.values())

    def _start_metrics(self) -> None:
        """``--metrics-listen``: the endpoint, fed the same batches as the screens."""
        listen = self._services.metrics_listen
        if listen is None:
            return
        from console.errors import ConsoleError
        from console.metrics.endpoint import MetricsEndpoint

        try:
            self.metrics = MetricsEndpoint(*listen).start()
        except ConsoleError as exc:
            self._app.notify(f"No metrics endpoint: {exc}", severity="error", timeout=15)
            return
        self._app.notify(f"Prometheus metrics at {self.metrics.url}", timeout=8)

    async def close(self) -> None:
        """Close what the feeds opened, each within ``close_timeout_s``."""
        services = self._services
        timeout = services.settings.close_timeout_s
        if self.metrics is not None:
            self.metrics.close()
        if services.forwards is not None:  # they close with the console
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(services.forwards.close_all(), timeout)
        if services.jobs is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(services.jobs.close(), timeout)
        if services.monitor is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(services.monitor.close(), timeout)
        if services.connections is not None:
            # Quitting must not hang on a host that black-holes the close; jobs are
            # detached on their hosts, so nothing is lost by giving up here.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(services.connections.close(), timeout)
