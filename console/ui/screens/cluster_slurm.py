"""The GPU screen's Slurm side: the jobs Slurm says hold each host's GPUs, and the
nodes no inventory host maps to, drawn as hosts known only from Slurm (``ui/store.py``
says which). A base of :class:`~console.ui.screens.cluster.ClusterScreen`,
which holds the state and the views; this part reads the app's store."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from textual.containers import VerticalScroll
from textual.screen import Screen

from console.inventory import Host
from console.probe.models import HostView
from console.ui.overview import slurm_held
from console.ui.services import Services
from console.ui.store import SLURM_ONLY_TAG
from console.ui.widgets.gpu_grid import GpuGrid
from console.ui.widgets.gpu_panel import HostPanel


def legend_note(hosts: Iterable[Host]) -> str:
    """What the dense view's legend adds: which blocks are nodes known only from Slurm."""
    names = sorted(h.name for h in hosts if SLURM_ONLY_TAG in h.tags)
    return f"   {SLURM_ONLY_TAG} (not in the inventory): {', '.join(names)}" if names else ""


class ClusterSlurm(Screen[None]):
    services: Services
    hosts: list[Host]  # the inventory's, then those known only from Slurm
    grid: GpuGrid
    dense: bool
    _panels: dict[str, HostPanel]
    _longest_name: int

    if TYPE_CHECKING:  # provided by ClusterScreen

        @property
        def views(self) -> Mapping[str, HostView]: ...
        def _make_panels(self, hosts: Iterable[Host] | None = None) -> list[HostPanel]: ...
        def apply_views(self, batch: Mapping[str, HostView]) -> None: ...
        def _show_legend(self) -> None: ...
        def _show_summary(self) -> None: ...

    def apply_slurm(self, changed: Mapping[str, object]) -> None:
        """Hosts whose Slurm jobs changed (already in the store, ``grid.slurm``)."""
        self._add_slurm_hosts()
        for name in changed:
            for label, _gpus in slurm_held(self.services.store.slurm.get(name, ())):
                self.grid.letters.letter(label)
        if not self.is_mounted:
            return
        if self.dense:
            self.grid.take(changed)
            self._show_legend()
        self._show_summary()

    def _add_slurm_hosts(self) -> None:
        """Draw the nodes known only from Slurm that are new in the store: a block in the
        grid, a panel where the detailed view exists, their first view."""
        drawn = {h.name for h in self.hosts}
        new = [h for h in self.services.store.slurm_hosts.values() if h.name not in drawn]
        if not new:
            return
        self.hosts += new
        self.grid.hosts += new
        if self._panels:
            panels = self._make_panels(new)
            if self.is_mounted:
                self.query_one("#panels", VerticalScroll).mount_all(panels)
                for panel in panels:
                    panel.set_name_width(self._longest_name)
        self.apply_views({h.name: self.views[h.name] for h in new if h.name in self.views})
        if self.is_mounted and self.dense:
            self.grid.rearrange()
