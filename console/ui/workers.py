"""The app's feeds: the loops that read the core's async iterators into inboxes.

Each loop runs as a Textual worker started on the app (workers belong to a DOM node, so
the app's ``on_worker_state_changed`` still hears of a failed one, by group:
``connections`` for host statuses, GPU views and the Slurm queue, ``jobs`` for the job
rows). A loop only ``put``s into its inbox; the app takes each batch, writes the store
and hands the changed part to screens (:class:`FeedArrivals`, a base of the app). The
loops also fill in ``Services``' ``connections``, ``monitor`` and ``jobs`` as each comes
to exist, and :meth:`close` closes them when the app unmounts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from textual.app import App
from textual.worker import Worker, WorkerState

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
from console.ui.screens.host_detail import HostDetailScreen
from console.ui.services import Services

if TYPE_CHECKING:
    from console.jobs.slurm.queue import SlurmJobOnNode
    from console.metrics.endpoint import MetricsEndpoint
    from console.probe.models import HostView
    from console.transport.forward import PortForwards
    from console.ui.screens.cluster import ClusterScreen
    from console.ui.screens.hosts import HostsScreen
    from console.ui.screens.jobs import JobsScreen
    from console.ui.store import ClusterStore


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


class FeedArrivals(App[int]):
    """Where the feeds' batches land: a base of :class:`~console.ui.app.DistConsoleApp`.

    The store is written here only, then the changed part goes down to the screens
    ("attributes down"); a feed worker that fails is told to the user.
    """

    services: Services
    hosts_screen: HostsScreen
    cluster_screen: ClusterScreen
    jobs_screen: JobsScreen
    statuses_inbox: Inbox[HostStatus]
    views_inbox: Inbox[dict[str, HostView]]
    jobs_inbox: Inbox[list[JobRow]]
    slurm_inbox: Inbox[dict[str, tuple[SlurmJobOnNode, ...]]]

    if TYPE_CHECKING:  # provided by DistConsoleApp

        @property
        def store(self) -> ClusterStore: ...

    def apply_statuses(self, statuses: Iterable[HostStatus]) -> None:
        changed = self.store.apply_statuses(statuses)
        if changed:
            self.hosts_screen.apply_statuses(changed.values())
            # A down host's panel says why and since when as soon as it goes down.
            self.cluster_screen.apply_statuses(changed.values())

    def apply_views(self, *batches: Mapping[str, HostView]) -> None:
        merged = self.store.apply_views(batches)
        self.cluster_screen.apply_views(merged)
        if isinstance(self.screen, HostDetailScreen) and self.screen.host.name in merged:
            self.screen.take(merged[self.screen.host.name])

    def apply_job_rows(self, rows: Sequence[JobRow]) -> None:
        changed = self.store.apply_jobs(rows)
        if changed:
            self.jobs_screen.apply_rows(changed)
            self.cluster_screen.apply_slow()  # the GPU panels mark a slow rank's host

    def apply_slurm(self, occupancy: Mapping[str, tuple[SlurmJobOnNode, ...]]) -> None:
        changed = self.store.apply_slurm(occupancy)
        if changed:
            self.cluster_screen.apply_slurm(changed)
            # An open host detail lists the host's Slurm jobs: redraw them now.
            if isinstance(self.screen, HostDetailScreen) and self.screen.host.name in changed:
                self.screen.take(self.screen.view)

    def _refresh_latencies(self) -> None:
        """The transport re-measures latency without announcing it (no state changed):
        read the figures from the connections and pass on the hosts whose moved."""
        connections = self.services.connections
        if connections is None:
            return
        known = self.store.statuses
        moved = [
            status
            for name, status in connections.statuses().items()
            if name in known
            # Same state only: a state change arrives as an event, in its order.
            and status.state is known[name].state
            and status.latency_ms != known[name].latency_ms
        ]
        if moved:
            self.apply_statuses(moved)

    def on_host_statuses_arrived(self, _message: HostStatusesArrived) -> None:
        self.apply_statuses(self.statuses_inbox.take())

    def on_host_views_arrived(self, _message: HostViewsArrived) -> None:
        self.apply_views(*self.views_inbox.take())

    def on_slurm_occupancy_arrived(self, _message: SlurmOccupancyArrived) -> None:
        latest = self.slurm_inbox.take()
        if latest:  # each is the whole occupancy: the newest says it all
            self.apply_slurm(latest[-1])

    def on_job_rows_arrived(self, _message: JobRowsArrived) -> None:
        self.apply_job_rows([row for batch in self.jobs_inbox.take() for row in batch])

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is not WorkerState.ERROR:
            return
        what = {"connections": "Host connections", "jobs": "The job list"}
        if event.worker.group in what:
            self.notify(
                f"{what[event.worker.group]} stopped: {event.worker.error}",
                title=event.worker.group,
                severity="error",
                timeout=30,
            )
