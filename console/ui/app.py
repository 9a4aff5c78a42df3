"""The distconsole Textual app: screens over the core's async feeds.

Workers consume the core's async iterators and post messages to the app ("messages up");
the app gathers what arrived into batches, writes them to the one cluster store and
hands the changed part to screens ("attributes down"). Screens get the app's
:class:`Services` (the composition root) when they are made.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.dom import DOMNode
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from console import inventory as inventory_module
from console.inventory import Inventory
from console.probe.models import HostView
from console.settings import DEFAULT_SETTINGS, Settings
from console.transport.base import HostStatus
from console.ui.feeds import ConnectionsFactory, HostStatusSource, cluster_connections
from console.ui.inbox import Inbox
from console.ui.jobs_service import JobRow, JobsService
from console.ui.messages import (
    HostStatusesArrived,
    HostViewsArrived,
    JobRowsArrived,
    OpenLogs,
    SlurmOccupancyArrived,
)
from console.ui.palette import palette_commands
from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.help import HelpScreen, KeyHelp, keys_by_screen
from console.ui.screens.host_detail import HostDetailScreen
from console.ui.screens.hosts import HostsScreen
from console.ui.screens.jobs import ConfirmStop, JobsScreen
from console.ui.screens.launch import LaunchScreen
from console.ui.services import Services
from console.ui.store import ClusterStore
from console.ui.theming import (
    DEFAULT_THEME,
    STATE_VARIABLES,
    bundled_themes,
    check_theme,
    next_theme,
)

if TYPE_CHECKING:
    from console.jobs.slurm_queue import SlurmJobOnNode
    from console.probe.monitor import ClusterMonitor


class DistConsoleApp(App[int]):
    TITLE = "distconsole"
    # A named mode, not Textual's "_default": switch_mode() only knows added modes, so
    # `h` from another mode would raise UnknownModeError.
    DEFAULT_MODE = "hosts"
    # Set by run() for callers that open elsewhere or have something to say (the demo).
    first_screen: str | None = None
    startup_notice: str | None = None
    # Absolute, so subclasses defined elsewhere (tests, scripts) find it too.
    CSS_PATH = Path(__file__).with_name("app.tcss")
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        # f1 too: in the launch form every printable key (`?` included) is typed.
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("f1", "help", "Help", show=False),
        Binding("colon", "command_palette", "Commands", key_display=":"),
        Binding("h", "show_hosts", "Hosts"),
        Binding("g", "show_gpus", "GPUs"),
        Binding("j", "show_jobs", "Jobs"),
        Binding("l", "launch", "Launch"),
        Binding("t", "cycle_theme", "Theme"),
        Binding("f2", "save_screenshot", "Screenshot (SVG)", show=False),
    ]

    def __init__(
        self,
        inventory: Inventory,
        *,
        theme: str | None = None,
        connections_factory: ConnectionsFactory | None = cluster_connections,
        clock: Callable[[], float] = time.time,
        settings: Settings = DEFAULT_SETTINGS,
    ) -> None:
        """``connections_factory=None`` shows the inventory without connecting (screenshots);
        ``clock`` gives "now" for relative times (frozen in snapshot tests);
        ``settings.monitor_interval_s=None`` starts no GPU samplers."""
        super().__init__()
        store = ClusterStore(host.name for host in inventory.hosts)
        self.services = Services(inventory, settings, clock, store)
        self._connections_factory = connections_factory
        self.statuses_inbox: Inbox[HostStatus] = Inbox(self, HostStatusesArrived)
        self.views_inbox: Inbox[dict[str, HostView]] = Inbox(self, HostViewsArrived)
        self.jobs_inbox: Inbox[list[JobRow]] = Inbox(self, JobRowsArrived)
        self.slurm_inbox: Inbox[dict[str, tuple[SlurmJobOnNode, ...]]] = Inbox(
            self, SlurmOccupancyArrived
        )
        for bundled in bundled_themes():
            self.register_theme(bundled)
        self.theme = check_theme(theme) if theme else DEFAULT_THEME
        self.sub_title = f"{Path(inventory.path).name} · {len(inventory.hosts)} hosts"
        self.hosts_screen = HostsScreen(self.services)
        self.cluster_screen = ClusterScreen(self.services)
        # Each top-level screen is a mode: switching keeps its state and its pushed screens.
        self.jobs_screen = JobsScreen(self.services)
        self.add_mode("hosts", lambda: self.hosts_screen)
        self.add_mode("gpus", lambda: self.cluster_screen)
        self.add_mode("jobs", lambda: self.jobs_screen)

    # Read-only views of the services, for scripts and tests that drive the app.
    @property
    def inventory(self) -> Inventory:
        return self.services.inventory

    @property
    def store(self) -> ClusterStore:
        return self.services.store

    @property
    def connections(self) -> HostStatusSource | None:
        return self.services.connections

    @property
    def monitor(self) -> ClusterMonitor | None:
        return self.services.monitor

    @property
    def jobs(self) -> JobsService | None:
        return self.services.jobs

    def get_theme_variable_defaults(self) -> dict[str, str]:
        # Textual's built-in themes lack our variables; the CSS must parse under every theme.
        return dict(STATE_VARIABLES)

    def on_mount(self) -> None:
        if self.first_screen is not None:
            self.switch_mode(self.first_screen)
        if self.startup_notice:
            self.notify(self.startup_notice, timeout=15)
        if self._connections_factory is not None:
            self.set_interval(self.services.settings.refresh_s, self._refresh_latencies)
            self.run_worker(
                self._follow_host_statuses(self._connections_factory),
                name="host-statuses",
                group="connections",
                exit_on_error=False,
            )

    async def _follow_host_statuses(self, factory: ConnectionsFactory) -> None:
        connections = factory(self.inventory)
        self.services.connections = connections
        await connections.start()
        self.run_worker(self._attach_jobs(connections), group="connections", exit_on_error=False)
        interval = self.services.settings.monitor_interval_s
        if interval is not None:
            self.run_worker(
                self._follow_gpu_views(connections, interval),
                name="gpu-views",
                group="connections",
                exit_on_error=False,
            )
        if self.inventory.slurm is not None:
            self.run_worker(
                self._follow_slurm(connections),
                name="slurm-queue",
                group="connections",
                exit_on_error=False,
            )
        async for status in connections.subscribe():
            self.statuses_inbox.put(status)

    async def _follow_slurm(self, connections: HostStatusSource) -> None:
        from console.jobs.slurm_queue import SlurmQueuePoller, with_console_jobs
        from console.transport.pool import ClusterConnections

        if not isinstance(connections, ClusterConnections):
            return
        poller = SlurmQueuePoller(connections, self.inventory)
        async for found in poller.updates():
            occupancy = with_console_jobs(found, await asyncio.to_thread(self._slurm_launched))
            self.slurm_inbox.put(occupancy)
            if self.services.monitor is not None:  # nodes without SSH: sampled via srun
                self.services.monitor.follow_slurm(occupancy, poller.login.name)

    def _slurm_launched(self) -> dict[str, str]:
        """Slurm id -> distconsole job id of the jobs this console launched through
        Slurm (a job counts once: under its own id, not again as 'slurm N')."""
        import sqlite3

        from console.errors import JobError
        from console.jobs.slurm_store import SlurmStore

        jobs = self.services.jobs
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
        self.services.monitor = monitor
        async for batch in monitor.updates():
            self.views_inbox.put(batch)

    async def _attach_jobs(self, connections: HostStatusSource) -> None:
        from console.transport.pool import ClusterConnections

        if not isinstance(connections, ClusterConnections):
            return
        jobs = JobsService(connections, self.inventory, settings=self.services.settings)
        self.services.jobs = jobs
        self.run_worker(
            self._follow_job_rows(jobs), name="job-rows", group="jobs", exit_on_error=False
        )
        # Jobs started by an earlier console keep running on their hosts: follow them again.
        await connections.wait_settled()
        attached = await jobs.attach_unfinished()
        if attached:
            self.notify(f"Re-attached to {len(attached)} running job(s)", timeout=5)

    async def _follow_job_rows(self, jobs: JobsService) -> None:
        async for rows in jobs.row_updates():
            self.jobs_inbox.put(rows)

    # -- the store: written here only, then the changed part goes down to screens -------

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

    async def on_unmount(self) -> None:
        timeout = self.services.settings.close_timeout_s
        if self.jobs is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.jobs.close(), timeout)
        if self.monitor is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.monitor.close(), timeout)
        if self.connections is not None:
            # Quitting must not hang on a host that black-holes the close; jobs are
            # detached on their hosts, so nothing is lost by giving up here.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.connections.close(), timeout)

    # -- actions -----------------------------------------------------------------------

    def action_show_hosts(self) -> None:
        self.switch_mode("hosts")

    def action_show_gpus(self) -> None:
        self.switch_mode("gpus")

    def action_show_jobs(self) -> None:
        self.switch_mode("jobs")

    def on_open_logs(self, message: OpenLogs) -> None:
        self.open_logs(message.job_id)

    @work(group="open-logs", exclusive=True)
    async def open_logs(self, job_id: str) -> None:
        from console.errors import JobError
        from console.ui.screens.logs import LogsScreen

        if self.jobs is None:
            self.notify("Not connected to the cluster: no logs to follow", severity="warning")
            return
        try:
            plan = await self.jobs.plan_of(job_id)
        except JobError as exc:
            self.notify(str(exc), severity="error")
            return
        # On the jobs screen's stack whatever screen asked (the palette works anywhere):
        # the logs screen's q and j go back to the jobs screen below it.
        if self.current_mode != "jobs":
            self.switch_mode("jobs")
        self.push_screen(LogsScreen(plan, self.services))

    def action_launch(self) -> None:
        if isinstance(self.screen, LaunchScreen):
            return

        def launched(job_id: str | None) -> None:
            if job_id:
                self.notify(f"Job {job_id} is running", timeout=5)
                self.jobs_screen.select_job(job_id)
                self.switch_mode("jobs")

        self.push_screen(LaunchScreen(self.services), launched)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        self.push_screen(HelpScreen(self._key_help()))

    def _key_help(self) -> list[KeyHelp]:
        from console.ui.screens.logs import LogsScreen

        screens: list[tuple[str, type[DOMNode]]] = [
            ("Hosts screen (h)", HostsScreen),
            ("GPU screen (g)", ClusterScreen),
            ("Jobs screen (j)", JobsScreen),
            ("Launch form (l)", LaunchScreen),
            ("Logs of a job (Enter on the jobs screen)", LogsScreen),
            ("Host detail (Enter on a host)", HostDetailScreen),
            ("Stop confirmation (s on the jobs screen)", ConfirmStop),
        ]
        palette = Binding(self.COMMAND_PALETTE_BINDING, "command_palette", "Commands")
        everywhere = [*DistConsoleApp.BINDINGS, palette]
        return keys_by_screen(everywhere, screens, self.screen, self.get_key_display)

    def action_cycle_theme(self) -> None:
        self.set_theme(next_theme(self.theme, [t.name for t in bundled_themes()]))

    def set_theme(self, name: str) -> None:
        self.theme = name
        self.notify(f"Theme: {name}", timeout=2)

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from palette_commands(self)
        # Textual's own screenshot (to a downloads folder, silently) is replaced by ours;
        # its "Keys" panel lists Textual's bindings, not this app's (that is `?`).
        for command in super().get_system_commands(screen):
            if command.title not in ("Screenshot", "Keys"):
                yield command

    def stop_selected_job(self) -> None:
        self.switch_mode("jobs")
        # A first switch mounts the jobs screen: its cursor exists after that refresh.
        self.call_after_refresh(self._on_selected_job, self.jobs_screen.action_stop)

    def logs_of_selected_job(self) -> None:
        # Over the jobs screen, so that Esc from the logs lands where the job is listed.
        self.switch_mode("jobs")
        self.call_after_refresh(self._on_selected_job, self.jobs_screen.action_logs)

    def _on_selected_job(self, action: Callable[[], None]) -> None:
        if self.jobs_screen.selected_id is None:
            self.notify("No job selected: the jobs screen lists none", severity="warning")
            return
        action()

    def run_on(self, mode: str, action: Callable[[], None]) -> None:
        """Show a top-level screen, then run one of its actions (from the palette)."""
        self.switch_mode(mode)
        # The first switch mounts the screen: its widgets exist after that refresh.
        self.call_after_refresh(action)

    def action_save_screenshot(self) -> None:
        """An SVG of the current screen in ``services.screenshot_dir``; says where."""
        try:
            path = self.save_screenshot(path=str(self.services.screenshot_dir))
        except OSError as exc:
            self.notify(f"Screenshot not saved: {exc}", severity="error", timeout=15)
            return
        self.notify(f"Saved {Path(path).resolve()}", title="Screenshot", timeout=15)


def run(
    inventory_path: Path | str,
    theme: str | None = None,
    *,
    first_screen: str | None = None,
    sub_title: str | None = None,
    notice: str | None = None,
) -> int:
    """Open the console on an inventory; 2 for a bad --theme (InventoryError propagates).

    ``first_screen`` (a mode: hosts, gpus, jobs), ``sub_title`` and ``notice`` (shown
    once) let a caller such as ``distconsole demo`` say what it started."""
    try:
        chosen = check_theme(theme)
    except ValueError as exc:
        print(f"distconsole: {exc}", file=sys.stderr)
        return 2
    inventory = inventory_module.load(inventory_path)
    app = DistConsoleApp(inventory, theme=chosen)
    app.first_screen = first_screen
    app.startup_notice = notice
    if sub_title is not None:
        app.sub_title = sub_title
    app.run()
    return app.return_code or 0
