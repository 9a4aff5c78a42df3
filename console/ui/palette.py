"""The command palette's own commands (`:` or ctrl+p): every action of the app, by name,
from any screen; the app adds Textual's (quit, theme picker) after them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, Protocol

from textual.app import SystemCommand

from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.hosts import HostsScreen
from console.ui.screens.jobs import JobsScreen
from console.ui.services import Services
from console.ui.theming import bundled_themes


class PaletteApp(Protocol):
    """What the palette reaches of the app (:class:`~console.ui.app.DistConsoleApp`): its
    screens and actions. Declared here so the palette never imports the app that lists it."""

    services: Services
    hosts_screen: HostsScreen
    cluster_screen: ClusterScreen
    jobs_screen: JobsScreen

    def action_show_hosts(self) -> None: ...
    def action_show_gpus(self) -> None: ...
    def action_show_jobs(self) -> None: ...
    def action_launch(self) -> None: ...
    def action_help(self) -> None: ...
    def action_cycle_theme(self) -> None: ...
    def action_save_screenshot(self) -> None: ...
    def stop_selected_job(self) -> None: ...
    def logs_of_selected_job(self) -> None: ...
    def run_on(self, mode: str, action: Callable[[], None]) -> None: ...
    def set_theme(self, name: str) -> None: ...
    def call_after_refresh(self, callback: Callable[..., Any], *args: Any) -> bool: ...


def palette_commands(app: PaletteApp, screen: object = None) -> Iterator[SystemCommand]:
    """``screen``: the one the palette was opened over (its own commands come first)."""
    curves = getattr(screen, "action_curves", None)  # the logs screen's
    if callable(curves):
        yield SystemCommand(
            "Training curves",
            "Logs screen: loss and steps/s per rank over steps, min/median/max past 16 (c)",
            curves,
        )
    yield SystemCommand("Hosts", "Show every host and its connection state", app.action_show_hosts)
    yield SystemCommand("GPUs", "Show every GPU of every host, live", app.action_show_gpus)
    yield SystemCommand("Jobs", "Show every job: state, hosts, ranks", app.action_show_jobs)
    yield SystemCommand("Launch", "Open the launch form for a new job", app.action_launch)
    yield SystemCommand(
        "Reconnect all",
        "Retry every host that is not up now, without waiting for the back-off",
        app.hosts_screen.action_reconnect_all,
    )
    yield SystemCommand(
        "Validate all hosts",
        "Measure every host that is up (validate: compute, memory, links) and keep the "
        "verdicts for the host detail (V on the hosts screen; v: the selected host)",
        partial(app.run_on, "hosts", app.hosts_screen.action_validate_all),
    )
    yield SystemCommand(
        "Stop the selected job",
        "Jobs screen: stop the job under the cursor (asks first)",
        app.stop_selected_job,
    )
    yield SystemCommand(
        "Report of the selected job",
        "Jobs screen: write the job's post-mortem bundle (summary, plan, logs, captures)",
        partial(app.run_on, "jobs", app.jobs_screen.action_report),
    )
    yield SystemCommand(
        "Shell on a rank of the selected job",
        "Jobs screen: ssh to the host of a rank, in the job's directory with its env (!)",
        partial(app.run_on, "jobs", app.jobs_screen.action_rank_shell),
    )
    yield SystemCommand(
        "Logs of the selected job",
        "Jobs screen: follow every rank's log of the job under the cursor",
        app.logs_of_selected_job,
    )
    yield SystemCommand(
        "Reconnect the selected host",
        "Hosts screen: retry the host under the cursor now",
        partial(app.run_on, "hosts", app.hosts_screen.action_reconnect),
    )
    yield SystemCommand(
        "Filter GPU hosts",
        "GPU screen: show only hosts whose name or tag matches",
        partial(app.run_on, "gpus", app.cluster_screen.action_filter),
    )
    yield SystemCommand(
        "Attention view",
        "GPU screen: only the GPUs that need a look (hot, memory full, idle under a job)",
        partial(app.run_on, "gpus", app.cluster_screen.action_toggle_attention),
    )
    yield SystemCommand(
        "Dense/detailed GPU view",
        "GPU screen: a cell per GPU, many hosts a line (v) / a panel per host",
        partial(app.run_on, "gpus", app.cluster_screen.toggle_dense),
    )
    yield SystemCommand(
        "Screenshot",
        f"Save an SVG of the screen in {app.services.screenshot_dir}",
        # After the palette has gone, or the picture is of the palette.
        lambda: app.call_after_refresh(app.action_save_screenshot),
    )
    yield SystemCommand("Help", "List this app's keys, by screen", app.action_help)
    yield SystemCommand(
        "Next theme", "Switch to the next distconsole theme", app.action_cycle_theme
    )
    for bundled in bundled_themes():
        yield SystemCommand(
            f"Theme: {bundled.name}",
            f"Switch to the {bundled.name} theme",
            partial(app.set_theme, bundled.name),
        )
