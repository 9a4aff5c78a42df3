"""The cluster screen: every GPU, live; two views of the same hosts, one key apart.

The dense view (``gpu_grid.py``: a cell per GPU, several hosts a line, 256 x 8 GPUs
on 200x50) is where a big cluster opens; the detailed view has one panel per host
(``gpu_panel.py``). Both share the summary line, the ``/`` filter, the attention view
and Enter into the host's detail. Panels are made the first time the detailed view
shows, so a 256-host console does not lay out 256 panels it may never show.

Host views live in the app's store; the app hands this screen each batch that changed.
A host without a sample says what its connection says (state, since when, why): those
statuses come from the store too, handed down with :meth:`apply_statuses` or picked up
by the screen's once-a-second refresh.

Parts, its bases: ``cluster_nav.py`` (which hosts show, in which order, the keys that
change the view and move between hosts), ``cluster_slurm.py`` (the Slurm side).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Header, Input, Static

from console.inventory import Host
from console.probe.models import HostView
from console.transport.base import HostStatus
from console.ui.attention import Thresholds
from console.ui.job_rows import rendezvous_roles
from console.ui.overview import ClusterSummary, HostTotals, summary_text
from console.ui.screens.cluster_nav import ClusterNav
from console.ui.screens.cluster_slurm import legend_note
from console.ui.services import Services
from console.ui.widgets.gpu_columns import GpuColumnsHeader
from console.ui.widgets.gpu_grid import GpuGrid
from console.ui.widgets.gpu_grid_paint import jobs_text, legend
from console.ui.widgets.gpu_panel import HostPanel, short_gpu_name
from console.ui.widgets.keys_footer import KeysFooter
from console.ui.widgets.slow_marks import HostSlow, slow_by_host

# From this many hosts on the screen opens on the dense view (v switches).
DENSE_FROM_HOSTS = 17


class ClusterScreen(ClusterNav):
    DEFAULT_CSS = """
    ClusterScreen #no-match {
        padding: 1 2;
        color: $warning;
    }
    """
    BINDINGS = [
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("a", "toggle_attention", "Attention"),
        Binding("enter", "detail", "Host detail"),
        Binding("v", "toggle_dense", "Dense/detailed"),
        Binding("m", "toggle_metric", "Util/memory"),
        Binding("s", "cycle_sort", "Sort"),
        Binding("b", "cycle_group", "Group"),
        # Priority: the scroll container's own up/down would only scroll, not move focus.
        Binding("down", "next_panel", "Next host", show=False, priority=True),
        Binding("up", "previous_panel", "Previous host", show=False, priority=True),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(self, services: Services) -> None:
        super().__init__(name="gpus")
        self.services = services
        self.inventory = services.inventory
        self._clock = services.clock
        self.thresholds = Thresholds.of(services.settings)
        self.query_text = ""
        self.attention_only = False
        self.dense = len(self.inventory.hosts) >= DENSE_FROM_HOSTS
        # The inventory's hosts, then Slurm nodes no inventory host maps to (store.py).
        self.hosts = [*self.inventory.hosts, *services.store.slurm_hosts.values()]
        self._panels: dict[str, HostPanel] = {}
        self._stats: dict[str, HostTotals] = {}
        # What the summary and legend lines show now: most batches change neither, and
        # re-rendering them was a tenth of a 64-host console's steady CPU.
        self._summary_shown: str | None = None
        self._legend_shown: Text | None = None
        self._longest_name = 0
        self.grid = GpuGrid(
            self.hosts,
            services.store.views,
            services.store.statuses,
            thresholds=self.thresholds,
            id="gpu-grid",
        )
        self.grid.shown = self._host_visible
        self.grid.slurm = services.store.slurm

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(
            placeholder="filter hosts by name or tag (Enter keeps, Esc clears)", id="filter"
        )
        self._summary_shown = self._summary()
        yield Static(self._summary_shown, id="cluster-summary", markup=False)
        yield Static("", id="no-match", markup=False)
        yield GpuColumnsHeader(id="gpu-columns")
        with VerticalScroll(id="panels"):
            if not self.dense:
                yield from self._make_panels()
        yield self.grid
        yield Static("", id="grid-legend")
        yield KeysFooter()

    def _slow_marks(self) -> dict[str, tuple[HostSlow, ...]]:
        return slow_by_host((r.id, r.slow_ranks) for r in self.services.store.jobs.values())

    def apply_slow(self) -> None:
        """The jobs' slow ranks (the store's rows, issue 32) marked on their hosts' panels."""
        marks = self._slow_marks()
        roles = rendezvous_roles(self.services.store.jobs.values())
        for name, panel in self._panels.items():
            panel.set_slow(marks.get(name, ()))
            panel.set_role(roles.get(name, ""))

    def _make_panels(self, hosts: Iterable[Host] | None = None) -> list[HostPanel]:
        made = []
        marks = self._slow_marks()
        for host in self.hosts if hosts is None else hosts:
            panel = HostPanel(host, clock=self._clock, thresholds=self.thresholds)
            panel.slow = marks.get(host.name, ())
            panel.role = rendezvous_roles(self.services.store.jobs.values()).get(host.name, "")
            panel.attention_only = self.attention_only
            panel.display = self._host_visible(host)
            self._panels[host.name] = panel
            made.append(panel)
        return made

    @property
    def views(self) -> Mapping[str, HostView]:
        return self.services.store.views

    def on_mount(self) -> None:
        self.query_one("#no-match", Static).display = False
        self._show_view()
        for panel in self._panels.values():
            panel.set_name_width(self._longest_name)
        if self.views:  # arrived before the panels existed
            self.apply_views(dict(self.views))
        self._take_statuses(self.services.store.statuses.values())
        self.set_interval(self.services.settings.refresh_s, self._refresh_ages)
        self.call_after_refresh(self._focus_first_panel)

    def _show_view(self) -> None:
        """Show the widgets of the current view (dense or detailed), hide the others."""
        for selector in ("#gpu-columns", "#panels"):
            self.query_one(selector, Widget).display = not self.dense
        for selector in ("#gpu-grid", "#grid-legend"):
            self.query_one(selector, Widget).display = self.dense
        if self.dense:
            self.grid.rearrange()
            self._show_legend()

    # -- data in -------------------------------------------------------------------------

    def apply_views(self, batch: Mapping[str, HostView]) -> None:
        """A batch of host views (only the hosts that changed; already in the store)."""
        longest = self._longest_name
        for name, view in batch.items():
            totals = HostTotals.of(view, self.thresholds)
            self._stats[name] = totals
            for job, _count in totals.jobs:
                self.grid.letters.letter(job)  # a job's letter: from its first sample on
            for gpu in view.sample.gpus if view.sample else ():
                longest = max(longest, len(short_gpu_name(gpu.name)))
        if not self.is_mounted:
            self._longest_name = longest
            return
        if self.dense:
            self.grid.take(batch)
            self._show_legend()
        if self._panels:
            self._panels_take(batch, longest)
        self._longest_name = longest
        if self.attention_only:
            self._apply_visibility()  # which hosts need attention may have changed
        self._show_summary()

    def _panels_take(self, batch: Mapping[str, HostView], longest: int) -> None:
        if longest != self._longest_name:
            # Every panel's columns line up under one header: a longer name widens all.
            for each in self._panels.values():
                each.set_name_width(longest)
        for name, view in batch.items():
            panel = self._panels.get(name)
            if panel is not None:
                panel.take(view)

    def apply_statuses(self, statuses: Iterable[HostStatus]) -> None:
        """Connection statuses that changed (already in the store)."""
        if self.is_mounted:
            self._take_statuses(statuses)

    def _take_statuses(self, statuses: Iterable[HostStatus]) -> None:
        counted = False
        for status in statuses:
            if status.name not in self.views:  # a view, once there, says more
                self._stats[status.name] = HostTotals.of_status(status)
                counted = True
            self.grid.set_status(status.name)
            panel = self._panels.get(status.name)
            if panel is not None:
                panel.set_status(status)
        if counted:
            self._show_summary()

    def on_host_panel_columns_changed(self, message: HostPanel.ColumnsChanged) -> None:
        self.query_one("#gpu-columns", GpuColumnsHeader).show(message.columns)

    def _show_summary(self) -> None:
        text = self._summary()
        if text != self._summary_shown:
            self._summary_shown = text
            # One fixed-height line: no layout needed, only a repaint.
            self.query_one("#cluster-summary", Static).update(text, layout=False)

    def _show_legend(self) -> None:
        palette = self.grid.palette()
        text = legend(palette, self.grid.metric, self.grid.sort, self.grid.group)
        text.append(legend_note(self.hosts) + "\n")
        text.append_text(jobs_text(palette, self._cluster_summary().jobs, self.grid.letters))
        if text != self._legend_shown:
            self._legend_shown = text
            self.query_one("#grid-legend", Static).update(text, layout=False)

    def _refresh_ages(self) -> None:
        # Down hosts say how long ago they were last seen; that text ages by itself.
        # Only panels in view: an off-screen one catches up within a second of showing.
        if self.dense:
            return
        statuses = self.services.store.statuses
        for name, panel in self._panels.items():
            view = panel.view
            if view is None or view.sample is None:
                panel.set_status(statuses.get(name))
                if panel.in_view():
                    panel.refresh()
            elif not view.live and panel.in_view():
                panel.watch_view(view)

    def _cluster_summary(self) -> ClusterSummary:
        # Per-host figures are computed once per new view, not over every GPU per batch.
        # The filter and the attention view count what they show, not the whole cluster.
        hosts = self.hosts
        if self.query_text or self.attention_only:
            hosts = [h for h in hosts if self._host_visible(h)]
        names = {h.name for h in hosts}
        store = self.services.store.slurm
        slurm = [jobs for name, jobs in store.items() if name in names]
        stats = [totals for name, totals in self._stats.items() if name in names]
        return ClusterSummary.of(len(hosts), stats, slurm)

    def _summary(self) -> str:
        return summary_text(
            self._cluster_summary(),
            attention_only=self.attention_only,
            query=self.query_text,
            # The dense view names the jobs, with their letters, under the grid.
            jobs=not self.dense,
        )
