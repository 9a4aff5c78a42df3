"""The cluster screen: one GPU panel per host, live; filter, attention view, host detail.

Host views live in the app's store; the app hands this screen each batch that changed.
A host without a sample says what its connection says (state, since when, why): those
statuses come from the store too, handed down with :meth:`apply_statuses` or picked up
by the screen's once-a-second refresh.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Static

from console.inventory import Host
from console.probe.models import HostView
from console.transport.base import HostStatus
from console.ui.attention import DEFAULT_THRESHOLDS, Thresholds, gpu_alerts, host_needs_attention
from console.ui.services import Services
from console.ui.widgets.gpu_columns import GpuColumnsHeader
from console.ui.widgets.gpu_panel import HostPanel, short_gpu_name


@dataclass(frozen=True, slots=True)
class ClusterTotals:
    """One host's share of the summary line (summed over hosts into the cluster's totals)."""

    down: bool = False
    gpus: int = 0
    util_sum: float = 0.0
    util_count: int = 0
    memory_sum: float = 0.0
    memory_count: int = 0
    attention: int = 0
    simulated: bool = False

    @classmethod
    def of(cls, view: HostView, limits: Thresholds = DEFAULT_THRESHOLDS) -> ClusterTotals:
        down = not view.live
        sample = view.sample
        simulated = sample is not None and sample.simulated
        if down or sample is None:
            return cls(down=down, simulated=simulated)
        gpus = sample.gpus
        utils = [g.utilization_gpu for g in gpus if g.utilization_gpu is not None]
        memory = [f for f in (g.memory_fraction for g in gpus) if f is not None]
        return cls(
            gpus=len(gpus),
            util_sum=sum(utils),
            util_count=len(utils),
            memory_sum=sum(memory),
            memory_count=len(memory),
            attention=sum(1 for g in gpus if gpu_alerts(g, limits)),
            simulated=simulated,
        )


def matches(host: Host, query: str) -> bool:
    """``/`` filter: a case-insensitive substring of the host's name or of one of its tags."""
    q = query.strip().lower()
    return not q or q in host.name.lower() or any(q in t.lower() for t in host.tags)


class ClusterScreen(Screen[None]):
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
        self._panels: dict[str, HostPanel] = {}
        self._stats: dict[str, ClusterTotals] = {}
        self._longest_name = 0

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(
            placeholder="filter hosts by name or tag (Enter keeps, Esc clears)", id="filter"
        )
        yield Static(self._summary(), id="cluster-summary", markup=False)
        yield GpuColumnsHeader(id="gpu-columns")
        with VerticalScroll(id="panels"):
            yield Static("", id="no-match", markup=False)
            for host in self.inventory.hosts:
                panel = HostPanel(host, clock=self._clock, thresholds=self.thresholds)
                self._panels[host.name] = panel
                yield panel
        yield Footer()

    @property
    def views(self) -> Mapping[str, HostView]:
        return self.services.store.views

    def on_mount(self) -> None:
        self.query_one("#no-match", Static).display = False
        for panel in self._panels.values():
            panel.set_name_width(self._longest_name)
        if self.views:  # arrived before the panels existed
            self.apply_views(dict(self.views))
        self._take_statuses(self.services.store.statuses.values())
        self.set_interval(self.services.settings.refresh_s, self._refresh_ages)
        self.call_after_refresh(self._focus_first_panel)

    # -- data in -------------------------------------------------------------------------

    def apply_views(self, batch: Mapping[str, HostView]) -> None:
        """A batch of host views (only the hosts that changed; already in the store)."""
        longest = self._longest_name
        for name, view in batch.items():
            self._stats[name] = ClusterTotals.of(view, self.thresholds)
            for gpu in view.sample.gpus if view.sample else ():
                longest = max(longest, len(short_gpu_name(gpu.name)))
        if not self._panels or not self.is_mounted:
            self._longest_name = longest
            return
        if longest != self._longest_name:
            # Every panel's columns line up under one header: a longer name widens all.
            self._longest_name = longest
            for each in self._panels.values():
                each.set_name_width(longest)
        for name, view in batch.items():
            panel = self._panels.get(name)
            if panel is not None:
                panel.take(view)
        if self.attention_only:
            self._apply_visibility()  # which hosts need attention may have changed
        self._show_summary()

    def apply_statuses(self, statuses: Iterable[HostStatus]) -> None:
        """Connection statuses that changed (already in the store)."""
        if self.is_mounted:
            self._take_statuses(statuses)

    def _take_statuses(self, statuses: Iterable[HostStatus]) -> None:
        for status in statuses:
            panel = self._panels.get(status.name)
            if panel is not None:
                panel.set_status(status)

    def on_host_panel_columns_changed(self, message: HostPanel.ColumnsChanged) -> None:
        self.query_one("#gpu-columns", GpuColumnsHeader).show(message.columns)

    def _show_summary(self) -> None:
        # One fixed-height line: no layout needed, only a repaint.
        self.query_one("#cluster-summary", Static).update(self._summary(), layout=False)

    def _refresh_ages(self) -> None:
        # Down hosts say how long ago they were last seen; that text ages by itself.
        # Only panels in view: an off-screen one catches up within a second of showing.
        statuses = self.services.store.statuses
        for name, panel in self._panels.items():
            view = panel.view
            if view is None or view.sample is None:
                panel.set_status(statuses.get(name))
                if panel.in_view():
                    panel.refresh()
            elif not view.live and panel.in_view():
                panel.watch_view(view)

    # -- visibility ----------------------------------------------------------------------

    def _visible(self, panel: HostPanel) -> bool:
        if not matches(panel.host, self.query_text):
            return False
        if self.attention_only:
            view = self.views.get(panel.host.name)
            return view is None or host_needs_attention(view, self.thresholds)
        return True

    def _apply_visibility(self) -> None:
        for panel in self._panels.values():
            shown = self._visible(panel)
            if panel.display != shown:
                panel.display = shown
            if panel.attention_only != self.attention_only:
                panel.attention_only = self.attention_only
        self._show_no_match()

    def _show_no_match(self) -> None:
        """An explicit line when the filter or the attention view leaves no host."""
        line = self.query_one("#no-match", Static)
        empty = not any(p.display for p in self._panels.values())
        if empty:
            query = self.query_text.strip()
            if query and self.attention_only:
                text = f"no host matches {query!r} and needs attention (a: every host)"
            elif query:
                text = f"no host matches {query!r} (Esc clears the filter)"
            else:
                text = "no host needs attention (a: every host)"
            line.update(text)
        if line.display != empty:
            line.display = empty

    def visible_hosts(self) -> list[str]:
        return [name for name, panel in self._panels.items() if panel.display]

    def _summary(self) -> str:
        # Per-host figures are computed once per new view, not over every GPU per batch.
        stats = list(self._stats.values())
        total = len(self.inventory.hosts)
        down = sum(s.down for s in stats)
        gpus = sum(s.gpus for s in stats)
        utils = sum(s.util_count for s in stats)
        memory = sum(s.memory_count for s in stats)
        attention = sum(s.attention for s in stats)
        # What the view is narrowed to comes first: at 80 columns the line's end is cut.
        parts = []
        if self.attention_only:
            parts.append("ATTENTION VIEW (a: all)")
        if self.query_text:
            parts.append(f"filter: {self.query_text!r}")
        parts += [f"{total} hosts" + (f" ({down} down)" if down else ""), f"{gpus} GPUs"]
        if utils:
            parts.append(f"util avg {sum(s.util_sum for s in stats) / utils:.0f}%")
        if memory:
            parts.append(f"memory avg {100 * sum(s.memory_sum for s in stats) / memory:.0f}%")
        if attention:
            parts.append(f"{attention} GPUs need attention")
        if any(s.simulated for s in stats):
            parts.append("simulated GPUs")
        return "  ·  ".join(parts)

    # -- actions -------------------------------------------------------------------------

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("-open")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.set_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            # The summary line keeps showing the filter; the box gives the keys back.
            event.input.remove_class("-open")
            self._focus_first_panel()

    def set_filter(self, text: str) -> None:
        self.query_text = text
        self._apply_visibility()
        self._show_summary()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("-open")
        self.set_filter("")
        self._focus_first_panel()

    def action_toggle_attention(self) -> None:
        self.attention_only = not self.attention_only
        self._apply_visibility()
        self._show_summary()

    def _focus_first_panel(self) -> None:
        shown = [p for p in self._panels.values() if p.display]
        if shown:
            shown[0].focus()

    def _move(self, step: int) -> None:
        shown = [p for p in self._panels.values() if p.display]
        if not shown:
            return
        current = self.focused
        index = shown.index(current) if isinstance(current, HostPanel) and current in shown else -1
        target = shown[(index + step) % len(shown)] if index >= 0 else shown[0]
        # Focus now, not later (Widget.focus defers): a held key's next press reads it.
        self.set_focus(target, scroll_visible=False)
        target.scroll_visible()

    def action_next_panel(self) -> None:
        self._move(1)

    def action_previous_panel(self) -> None:
        self._move(-1)

    def action_detail(self) -> None:
        focused = self.focused
        if not isinstance(focused, HostPanel):
            self._focus_first_panel()
            focused = self.focused
        if isinstance(focused, HostPanel):
            from console.ui.screens.host_detail import HostDetailScreen

            self.app.push_screen(HostDetailScreen(focused.host, self.services))
