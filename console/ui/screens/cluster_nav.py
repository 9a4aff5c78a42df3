"""The GPU screen's way around its hosts: which show (the ``/`` filter, the attention
view ``a``) and in which order, the dense or detailed view (``v``) and the grid's metric,
sort and group (``m``, ``s``, ``b``), moving between hosts and into one (Enter).

A base of :class:`~console.ui.screens.cluster.ClusterScreen`, which holds the state and
takes the data; this part reads them and changes only what is shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from textual.containers import VerticalScroll
from textual.widgets import Input, Static

from console.inventory import Host
from console.probe.models import HostView
from console.transport.base import HostStatus
from console.ui.attention import Thresholds, health_rank
from console.ui.host_filter import host_shown, no_match_text
from console.ui.screens.cluster_slurm import ClusterSlurm
from console.ui.widgets.gpu_grid import GpuGrid
from console.ui.widgets.gpu_grid_layout import GROUPS, METRICS, SORTS
from console.ui.widgets.gpu_panel import HostPanel, panel_after


class ClusterNav(ClusterSlurm):
    thresholds: Thresholds
    query_text: str  # the / filter's text
    attention_only: bool

    if TYPE_CHECKING:  # provided by ClusterScreen

        def _show_view(self) -> None: ...
        def _panels_take(self, batch: Mapping[str, HostView], longest: int) -> None: ...
        def _take_statuses(self, statuses: Iterable[HostStatus]) -> None: ...

    def _host_visible(self, host: Host) -> bool:
        return host_shown(
            host,
            self.views.get(host.name),
            query=self.query_text,
            attention_only=self.attention_only,
            thresholds=self.thresholds,
        )

    def _apply_visibility(self) -> None:
        for panel in self._panels.values():
            shown = self._host_visible(panel.host)
            if panel.display != shown:
                panel.display = shown
            if panel.attention_only != self.attention_only:
                panel.attention_only = self.attention_only
        self._order_panels()
        if self.dense:
            self.grid.health_first = self.attention_only
            self.grid.rearrange()
        self._show_no_match()

    def _order_panels(self) -> None:
        """The attention view: panels of hosts with failing GPUs first, then warning
        ones (stable: inventory order within each); every other view: inventory order."""
        panels = list(self._panels.values())
        if not panels or not self.is_mounted:
            return
        wanted = panels
        if self.attention_only:
            wanted = sorted(panels, key=lambda p: -health_rank(self.views.get(p.host.name)))
        box = self.query_one("#panels", VerticalScroll)
        if [c for c in box.children if isinstance(c, HostPanel)] != wanted:
            for index, panel in enumerate(wanted):
                box.move_child(panel, before=index)

    def _show_no_match(self) -> None:
        """An explicit line when the filter or the attention view leaves no host."""
        line = self.query_one("#no-match", Static)
        empty = not self.visible_hosts()
        if empty:
            line.update(no_match_text(self.query_text, self.attention_only))
        if line.display != empty:
            line.display = empty

    def visible_hosts(self) -> list[str]:
        """The hosts the current view shows, in its order."""
        if self.dense:
            return self.grid.visible_hosts()
        if not self.is_mounted:
            return [name for name, panel in self._panels.items() if panel.display]
        box = self.query_one("#panels", VerticalScroll)
        return [p.host.name for p in box.children if isinstance(p, HostPanel) and p.display]

    # -- actions -------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Dense view only: hidden in the other, so the footer keeps the app's keys.
        return self.dense or action not in ("toggle_metric", "cycle_sort", "cycle_group")

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
        # A view that hid the focused panel (or showed none) left no focus: Enter then
        # opened nothing. Focus the first panel the new view shows.
        focused = self.focused
        if self.dense or not (isinstance(focused, HostPanel) and focused.display):
            self._focus_first_panel()

    def toggle_dense(self) -> None:
        """For callers that cannot await (the palette): the same as pressing v."""
        self.call_next(self.action_toggle_dense)

    async def action_toggle_dense(self) -> None:
        self.dense = not self.dense
        if not self.dense and not self._panels:
            await self.query_one("#panels", VerticalScroll).mount_all(self._make_panels())
            for panel in self._panels.values():
                panel.set_name_width(self._longest_name)
            self._panels_take(dict(self.views), self._longest_name)
            self._take_statuses(self.services.store.statuses.values())
        self._show_view()
        self._show_summary()
        self._show_no_match()
        self.refresh_bindings()
        cursor = self.grid.cursor
        if not self.dense and cursor in self._panels and self._panels[cursor].display:
            self._panels[cursor].focus()  # the same host, in the other view
        else:
            self._focus_first_panel()

    def action_toggle_metric(self) -> None:
        self.grid.configure(metric=_next(METRICS, self.grid.metric))
        self._show_legend()

    def action_cycle_sort(self) -> None:
        self.grid.configure(sort=_next(SORTS, self.grid.sort))
        self._show_legend()

    def action_cycle_group(self) -> None:
        self.grid.configure(group=_next(GROUPS, self.grid.group))
        self._show_legend()

    def _focus_first_panel(self) -> None:
        target = self.grid if self.dense else panel_after(self._panels.values(), None, 0)
        if target is not None:
            target.focus()

    def _move(self, step: int) -> None:
        if self.dense:
            self.grid.move_cursor(0, step)
        elif target := panel_after(self._panels.values(), self.focused, step):
            # Focus now, not later (Widget.focus defers): a held key's next press reads it.
            self.set_focus(target, scroll_visible=False)
            target.scroll_visible()

    def action_next_panel(self) -> None:
        self._move(1)

    def action_previous_panel(self) -> None:
        self._move(-1)

    def selected_host(self) -> Host | None:
        """The host Enter opens: the grid's cursor, or the focused panel."""
        if self.dense:
            name = self.grid.cursor
            return next((h for h in self.hosts if h.name == name), None)
        focused = self.focused
        if not isinstance(focused, HostPanel) or not focused.display:
            # Nothing focused (focus moves later than this is read): the first shown.
            focused = panel_after(self._panels.values(), None, 0)
            if focused is not None:
                self.set_focus(focused)
        return focused.host if focused is not None else None

    def action_detail(self) -> None:
        host = self.selected_host()
        if host is not None:
            from console.ui.screens.host_detail import HostDetailScreen

            self.app.push_screen(HostDetailScreen(host, self.services))

    def on_gpu_grid_host_clicked(self, _message: GpuGrid.HostClicked) -> None:
        self.grid.focus()


def _next(choices: tuple[str, ...], current: str) -> str:
    return choices[(choices.index(current) + 1) % len(choices)]
