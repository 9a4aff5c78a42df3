"""The distconsole Textual app: screens over the core's async feeds.

Workers (the loops of ``workers.py`` ``AppFeeds``, started on the app) consume the core's
async iterators and post messages to the app ("messages up"); the app gathers what
arrived into batches, writes them to the one cluster store and hands the changed part to
screens ("attributes down"; ``workers.FeedArrivals``, a base of the app). Screens get
the app's :class:`Services` (the composition root) when they are made.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from textual import work
from textual.app import SystemCommand
from textual.binding import Binding
from textual.dom import DOMNode
from textual.screen import Screen

from console import inventory as inventory_module
from console.inventory import Inventory
from console.settings import DEFAULT_SETTINGS, Settings
from console.ui.feeds import ConnectionsFactory, HostStatusSource, cluster_connections
from console.ui.jobs_service import JobRow, JobsService
from console.ui.messages import OpenLogs
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
from console.ui.workers import AppFeeds, FeedArrivals

if TYPE_CHECKING:
    from console.probe.monitor import ClusterMonitor


# Young collections every this many allocations (Python's default: 700). Under a log
# firehose the app allocates so fast that the default ran a full collection, which walks
# every object the app holds (~245 k, mostly Textual's) for 130-170 ms, 2-3 times a
# second: the keys' p99. Young collections stay short; full ones come ~14x less often.
GC_YOUNG_THRESHOLD = 10_000


def tune_collector() -> None:
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(max(_young, GC_YOUNG_THRESHOLD), middle, old)


class DistConsoleApp(FeedArrivals):
    TITLE = "distconsole"
    # A named mode, not Textual's "_default": switch_mode() only knows added modes, so
    # `h` from another mode would raise UnknownModeError.
    DEFAULT_MODE = "hosts"
    # Set by run() for callers that open elsewhere or have something to say (the demo).
    first_screen: str | None = None
    startup_notice: str | None = None
    # Set by run() (a real terminal): SIGTERM and SIGHUP (the terminal window closed) end
    # the app as `q` does, so whoever called run() cleans up after it (the demo powers its
    # hosts off). Not in tests, whose one process hosts many apps.
    exit_on_signals = False
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
        # The worker loops and their inboxes; the inboxes are named here too, as before.
        self.feeds = AppFeeds(self, self.services)
        self.statuses_inbox = self.feeds.statuses_inbox
        self.views_inbox = self.feeds.views_inbox
        self.jobs_inbox = self.feeds.jobs_inbox
        self.slurm_inbox = self.feeds.slurm_inbox
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
        if self.exit_on_signals:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGHUP):
                loop.add_signal_handler(sig, self.exit)
        if self.first_screen is not None:
            self.switch_mode(self.first_screen)
        if self.startup_notice:
            self.notify(self.startup_notice, timeout=15)
        if self._connections_factory is not None:
            self.set_interval(self.services.settings.refresh_s, self._refresh_latencies)
            self.feeds.start(self._connections_factory)

    async def on_unmount(self) -> None:
        await self.feeds.close()

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
                self.notify(launched_text(job_id, self.services.store.jobs.get(job_id)), timeout=5)
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
        yield from palette_commands(self, screen)
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


def launched_text(job_id: str, row: JobRow | None) -> str:
    """What a launch from the form says: the job's state when it is known to have
    ended already (a short job can succeed before the form closes), else started."""
    if row is not None and row.state.finished:
        return f"Job {job_id} started and has already {row.state.value}"
    return f"Job {job_id} started"


def run(
    inventory_path: Path | str,
    theme: str | None = None,
    *,
    first_screen: str | None = None,
    title: str | None = None,
    sub_title: str | None = None,
    notice: str | None = None,
    metrics_listen: tuple[str, int] | None = None,
    started: tuple[str, ...] = (),
) -> int:
    """Open the console on an inventory; 2 for a bad --theme (InventoryError propagates).

    ``first_screen`` (a mode: hosts, gpus, jobs), ``title``, ``sub_title``, ``notice`` (shown
    once) let a caller such as ``distconsole demo`` say what it started; ``started``:
    the ids of the jobs it started for this console (not "re-attached to")."""
    try:
        chosen = check_theme(theme)
    except ValueError as exc:
        print(f"distconsole: {exc}", file=sys.stderr)
        return 2
    inventory = inventory_module.load(inventory_path)
    app = DistConsoleApp(inventory, theme=chosen)
    app.first_screen = first_screen
    app.startup_notice = notice
    app.services.started_here = started
    app.services.metrics_listen = metrics_listen  # served by the feeds (ui/workers.py)
    app.exit_on_signals = True
    if title is not None:
        app.title = title
    if sub_title is not None:
        app.sub_title = sub_title
    # Here, not in the app: it is process-wide, and test processes host many apps.
    tune_collector()
    app.run()
    return app.return_code or 0
