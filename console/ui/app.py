"""The distconsole Textual app: screens over the core's async feeds.

Workers consume the core's async iterators and post messages to the app ("messages up");
the app gathers what arrived into batches and hands them to screens ("attributes down").
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from console import inventory as inventory_module
from console.inventory import Inventory
from console.probe.models import HostView
from console.transport.base import HostStatus
from console.ui.feeds import ConnectionsFactory, HostStatusSource, cluster_connections
from console.ui.inbox import Inbox
from console.ui.job_control import JobControl
from console.ui.messages import HostStatusesArrived, HostViewsArrived
from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.help import HelpScreen, KeyHelp
from console.ui.screens.host_detail import HostDetailScreen
from console.ui.screens.hosts import HostsScreen
from console.ui.screens.jobs import JobsScreen
from console.ui.screens.launch import LaunchScreen
from console.ui.theming import (
    DEFAULT_THEME,
    STATE_VARIABLES,
    bundled_themes,
    check_theme,
    next_theme,
)

if TYPE_CHECKING:
    from console.probe.monitor import ClusterMonitor

CLOSE_TIMEOUT_S = 5.0


class DistConsoleApp(App[int]):
    TITLE = "distconsole"
    # A named mode, not Textual's "_default": switch_mode() only knows added modes, so
    # `h` from another mode would raise UnknownModeError.
    DEFAULT_MODE = "hosts"
    # Absolute, so subclasses defined elsewhere (tests, scripts) find it too.
    CSS_PATH = Path(__file__).with_name("app.tcss")
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("colon", "command_palette", "Commands", key_display=":"),
        Binding("h", "show_hosts", "Hosts"),
        Binding("g", "show_gpus", "GPUs"),
        Binding("j", "show_jobs", "Jobs"),
        Binding("l", "launch", "Launch"),
        Binding("t", "cycle_theme", "Theme"),
    ]

    def __init__(
        self,
        inventory: Inventory,
        *,
        theme: str | None = None,
        connections_factory: ConnectionsFactory | None = cluster_connections,
        clock: Callable[[], float] = time.time,
        monitor_interval: float | None = 1.0,
    ) -> None:
        """``connections_factory=None`` shows the inventory without connecting (screenshots);
        ``clock`` gives "now" for relative times (frozen in snapshot tests);
        ``monitor_interval=None`` starts no GPU samplers."""
        super().__init__()
        self.inventory = inventory
        self.clock = clock
        self._connections_factory = connections_factory
        self.connections: HostStatusSource | None = None
        self.monitor: ClusterMonitor | None = None
        self.jobs: JobControl | None = None
        self._monitor_interval = monitor_interval
        self.host_statuses: dict[str, HostStatus] = {}
        self.statuses_inbox: Inbox[HostStatus] = Inbox(self, HostStatusesArrived)
        self.views_inbox: Inbox[dict[str, HostView]] = Inbox(self, HostViewsArrived)
        for bundled in bundled_themes():
            self.register_theme(bundled)
        self.theme = check_theme(theme) if theme else DEFAULT_THEME
        self.sub_title = f"{Path(inventory.path).name} · {len(inventory.hosts)} hosts"
        self.hosts_screen = HostsScreen(inventory, clock=clock)
        self.cluster_screen = ClusterScreen(inventory, clock=clock)
        # Each top-level screen is a mode: switching keeps its state and its pushed screens.
        self.jobs_screen = JobsScreen(clock=clock)
        self.add_mode("hosts", lambda: self.hosts_screen)
        self.add_mode("gpus", lambda: self.cluster_screen)
        self.add_mode("jobs", lambda: self.jobs_screen)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        # Textual's built-in themes lack our variables; the CSS must parse under every theme.
        return dict(STATE_VARIABLES)

    def on_mount(self) -> None:
        if self._connections_factory is not None:
            self.run_worker(
                self._follow_host_statuses(self._connections_factory),
                name="host-statuses",
                group="connections",
                exit_on_error=False,
            )

    async def _follow_host_statuses(self, factory: ConnectionsFactory) -> None:
        connections = factory(self.inventory)
        self.connections = connections
        await connections.start()
        self.run_worker(self._attach_jobs(connections), group="connections", exit_on_error=False)
        if self._monitor_interval is not None:
            self.run_worker(
                self._follow_gpu_views(connections, self._monitor_interval),
                name="gpu-views",
                group="connections",
                exit_on_error=False,
            )
        async for status in connections.subscribe():
            self.statuses_inbox.put(status)

    async def _follow_gpu_views(self, connections: HostStatusSource, interval: float) -> None:
        from console.probe.monitor import ClusterMonitor
        from console.transport.pool import ClusterConnections

        if not isinstance(connections, ClusterConnections):
            return  # samplers run over the real pool's connections only
        monitor = ClusterMonitor(connections, interval=interval)
        self.monitor = monitor
        async for batch in monitor.updates():
            self.views_inbox.put(batch)

    async def _attach_jobs(self, connections: HostStatusSource) -> None:
        from console.transport.pool import ClusterConnections

        if not isinstance(connections, ClusterConnections):
            return
        self.jobs = JobControl(connections, self.inventory)
        # Jobs started by an earlier console keep running on their hosts: follow them again.
        await connections.wait_settled()
        attached = await self.jobs.attach_unfinished()
        if attached:
            self.notify(f"Re-attached to {len(attached)} running job(s)", timeout=5)

    def on_host_statuses_arrived(self, _message: HostStatusesArrived) -> None:
        latest = {status.name: status for status in self.statuses_inbox.take()}
        self.host_statuses.update(latest)
        self.hosts_screen.apply_statuses(latest.values())

    def on_host_views_arrived(self, _message: HostViewsArrived) -> None:
        merged: dict[str, HostView] = {}
        for batch in self.views_inbox.take():
            merged.update(batch)
        self.cluster_screen.apply_views(merged)
        if isinstance(self.screen, HostDetailScreen) and self.screen.host.name in merged:
            self.screen.take(merged[self.screen.host.name])

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR and event.worker.group == "connections":
            self.notify(
                f"Host connections stopped: {event.worker.error}",
                title="connections",
                severity="error",
                timeout=30,
            )

    async def on_unmount(self) -> None:
        if self.jobs is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.jobs.close(), CLOSE_TIMEOUT_S)
        if self.monitor is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.monitor.close(), CLOSE_TIMEOUT_S)
        if self.connections is not None:
            # Quitting must not hang on a host that black-holes the close; jobs are
            # detached on their hosts, so nothing is lost by giving up here.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.connections.close(), CLOSE_TIMEOUT_S)

    # -- actions -----------------------------------------------------------------------

    def action_show_hosts(self) -> None:
        self.switch_mode("hosts")

    def action_show_gpus(self) -> None:
        self.switch_mode("gpus")

    def action_show_jobs(self) -> None:
        self.switch_mode("jobs")

    def action_open_logs(self, job_id: str) -> None:
        from console.errors import JobError
        from console.ui.screens.logs import LogsScreen

        if self.jobs is None:
            self.notify("Not connected to the cluster: no logs to follow", severity="warning")
            return
        job = self.jobs.runner.jobs.get(job_id)
        try:
            plan = job.plan if job is not None else self.jobs.history.get(job_id).plan
        except JobError as exc:
            self.notify(str(exc), severity="error")
            return
        self.push_screen(LogsScreen(plan, clock=self.clock))

    def action_launch(self) -> None:
        if isinstance(self.screen, LaunchScreen):
            return

        def launched(job_id: str | None) -> None:
            if job_id:
                self.notify(f"Job {job_id} is running", timeout=5)
                self.jobs_screen.select_job(job_id)
                self.switch_mode("jobs")

        self.push_screen(LaunchScreen(self.inventory), launched)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        self.push_screen(HelpScreen(self._key_help()))

    def _key_help(self) -> list[KeyHelp]:
        """The keys of the screen below: the app's first, then the screen's, then widgets'."""
        rows: list[tuple[int, KeyHelp]] = []
        seen: set[str] = set()
        for key, active in self.screen.active_bindings.items():
            binding = active.binding
            if key in seen or not binding.description:
                continue
            seen.add(key)
            node = active.node
            if node is self:
                rank, scope = 0, "app"
            elif node is self.screen:
                # "logs:<job id>" names one logs screen; the help names the kind of screen.
                rank, scope = 1, (node.name or type(node).__name__).split(":")[0]
            else:
                rank, scope = 2, type(node).__name__
            rows.append((rank, KeyHelp(self.get_key_display(binding), binding.description, scope)))
        palette = Binding(self.COMMAND_PALETTE_BINDING, "command_palette")
        rows.append((0, KeyHelp(self.get_key_display(palette), "Commands", "app")))
        return [row for _, row in sorted(rows, key=lambda r: r[0])]

    def action_cycle_theme(self) -> None:
        self.set_theme(next_theme(self.theme, [t.name for t in bundled_themes()]))

    def set_theme(self, name: str) -> None:
        self.theme = name
        self.notify(f"Theme: {name}", timeout=2)

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield SystemCommand(
            "Hosts", "Show every host and its connection state", self.action_show_hosts
        )
        yield SystemCommand("GPUs", "Show every GPU of every host, live", self.action_show_gpus)
        yield SystemCommand("Jobs", "Show every job: state, hosts, ranks", self.action_show_jobs)
        yield SystemCommand("Launch", "Open the launch form for a new job", self.action_launch)
        yield SystemCommand(
            "Reconnect all",
            "Retry every host that is not up now, without waiting for the back-off",
            self.hosts_screen.action_reconnect_all,
        )
        yield SystemCommand("Help", "List every key of this screen", self.action_help)
        yield SystemCommand(
            "Next theme", "Switch to the next distconsole theme", self.action_cycle_theme
        )
        for bundled in bundled_themes():
            yield SystemCommand(
                f"Theme: {bundled.name}",
                f"Switch to the {bundled.name} theme",
                partial(self.set_theme, bundled.name),
            )
        yield from super().get_system_commands(screen)


def run(inventory_path: Path | str, theme: str | None = None) -> int:
    """Open the console on an inventory; 2 for a bad --theme (InventoryError propagates)."""
    try:
        chosen = check_theme(theme)
    except ValueError as exc:
        print(f"distconsole: {exc}", file=sys.stderr)
        return 2
    inventory = inventory_module.load(inventory_path)
    app = DistConsoleApp(inventory, theme=chosen)
    app.run()
    return app.return_code or 0
