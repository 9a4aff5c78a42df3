"""The hosts screen: every inventory host with its connection state, live.

Statuses live in the app's store; the app hands this screen the ones that changed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static

from console import display
from console.errors import ConsoleError
from console.inventory import Host, Inventory
from console.jobs.service import ValidationVerdict
from console.transport.base import HostState, HostStatus
from console.ui.feeds import HostStatusSource
from console.ui.overview import count
from console.ui.screens.forward import (
    FORWARD_BINDING,
    hidden_forwards_line,
    open_forwards,
    update_forwards_line,
)
from console.ui.services import Services
from console.ui.widgets.host_table import HostTable
from console.ui.widgets.keys_footer import KeysFooter
from console.validate.preflight import measure_and_keep
from console.validate.runner import Plan
from console.validate.verdicts import Row


def insecure_warning(inventory: Inventory) -> str | None:
    names = [h.name for h in inventory.hosts if h.insecure_host_keys]
    if not names:
        return None
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return (
        f"⚠ Host keys are NOT verified for {shown} (insecure_host_keys: true in "
        f"{inventory.path}): anyone on the network path could pose as these hosts."
    )


SEVERITY: dict[str, SeverityLevel] = {"ok": "information", "warn": "warning", "fail": "error"}


def validation_notice(what: str, rows: Sequence[Row], verdict: ValidationVerdict) -> str:
    """``Validated 4 hosts: warn (1 warn, 7 ok)`` and the first lines not ok."""
    counts = Counter(r.state for r in rows)
    said = ", ".join(f"{counts[s]} {s}" for s in ("fail", "warn", "ok") if counts[s])
    shown = [display.plain(line) for line in verdict.lines[:3]]
    more = len(verdict.lines) - len(shown)
    tail = [f"and {more} more: `distconsole health` lists them"] if more > 0 else []
    return "\n".join([f"Validated {what}: {verdict.state} ({said})", *shown, *tail])


class HostsScreen(Screen[None]):
    """Rows change in place as batches of changed :class:`HostStatus` arrive via
    ``apply_statuses``; the summary and the detail line read the store."""

    BINDINGS = [
        # Priority: the table's own Enter would only "select" the row.
        Binding("enter", "detail", "Details", priority=True),
        Binding("r", "reconnect", "Reconnect"),
        # The footer is full at 120 columns (`l Launch` was cut) and at 80 in its compact
        # form: `v` is shown (a newcomer looks for it there), `R` and `V` are left to `?`
        # and the palette (`:` Reconnect all / Validate all hosts).
        Binding("R", "reconnect_all", "Reconnect all", key_display="R", show=False),
        Binding("v", "validate", "Validate"),
        Binding("V", "validate_all", "Validate all", key_display="V", show=False),
        FORWARD_BINDING,
    ]

    def __init__(self, services: Services) -> None:
        super().__init__(name="hosts")
        self.services = services
        self.inventory = services.inventory
        self.validating = False

    def compose(self) -> ComposeResult:
        yield Header()
        warning = insecure_warning(self.inventory)
        if warning:
            yield Static(warning, id="insecure-banner", markup=False)
        yield Static(self._summary(), id="hosts-summary", markup=False)
        yield HostTable(self.inventory.hosts, clock=self.services.clock, id="hosts-table")
        yield Static("", id="host-detail", markup=False)
        yield hidden_forwards_line()
        yield KeysFooter()

    def on_mount(self) -> None:
        self.set_interval(self.services.settings.refresh_s, self._tick)
        if self.services.store.statuses:  # arrived before the table existed
            self.apply_statuses(self.services.store.statuses.values())

    def on_screen_resume(self) -> None:
        self._tick()  # ages moved while another screen was shown

    def _tick(self) -> None:
        if not self.is_current:
            return  # nobody reads the ages meanwhile; resuming brings them up to date
        self.table.refresh_ages()
        self.query_one("#hosts-summary", Static).update(self._summary())
        self._show_detail(self.table.selected_host)
        update_forwards_line(self, self.services)

    @property
    def table(self) -> HostTable:
        return self.query_one("#hosts-table", HostTable)

    def apply_statuses(self, statuses: Iterable[HostStatus]) -> None:
        """A batch of host status changes: rows, the summary and the detail line follow."""
        if not self.query(HostTable):
            return  # on_mount shows what the store holds by then
        self.table.apply(statuses)
        self.query_one("#hosts-summary", Static).update(self._summary())
        self._show_detail(self.table.selected_host)

    def _summary(self) -> str:
        total = len(self.inventory.hosts)
        counts = Counter(s.state.value for s in self.services.store.statuses.values())
        waiting = total - sum(counts.values())
        parts = [count(total, "host")]
        for state in HostState:
            n = counts.get(state.value, 0) + (waiting if state is HostState.CONNECTING else 0)
            if n:
                parts.append(f"{n} {state.value}")
        return "  ·  ".join(parts)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail(event.row_key.value)

    def _show_detail(self, name: str | None) -> None:
        detail = self.query_one("#host-detail", Static)
        status = self.services.store.statuses.get(name) if name else None
        if status is None:
            detail.update(f"{name}: waiting for the first connection attempt" if name else "")
            return
        changed = display.ago(status.since, self.services.clock())
        text = f"{status.name}: {status.state.value} (changed {changed})"
        if status.reason:
            text += f" — {status.reason}"
        detail.update(text)

    def action_detail(self) -> None:
        """The selected host in full (GPUs, processes), as from the GPU screen."""
        name = self.table.selected_host
        host = next((h for h in self.inventory.hosts if h.name == name), None)
        if host is None:
            return
        from console.ui.screens.host_detail import HostDetailScreen

        self.app.push_screen(HostDetailScreen(host, self.services))

    def action_forward(self) -> None:
        """A port on the selected host, here (``screens/forward.py``)."""
        name = self.table.selected_host
        open_forwards(self, self.services, f"{name}:" if name else "")

    def action_reconnect(self) -> None:
        self._reconnect(self.table.selected_host)

    def action_reconnect_all(self) -> None:
        self._reconnect(None)

    def action_validate(self) -> None:
        """`distconsole validate` on the selected host (the datasheet and quota rules:
        a fleet median needs two hosts)."""
        self._validate(self.table.selected_host)

    def action_validate_all(self) -> None:
        self._validate(None)

    def _validate(self, name: str | None) -> None:
        connections = self.services.connections
        if connections is None:
            self.notify("Not connected to any host in this view", severity="warning")
            return
        if self.validating:
            self.notify("A validation is running: its verdicts come first", severity="warning")
            return
        up = {n for n, s in self.services.store.statuses.items() if s.is_up}
        hosts = [h for h in self.inventory.hosts if h.name in up and name in (None, h.name)]
        if not hosts:
            self.notify(f"{name or 'No host'} is not up: nothing to validate", severity="warning")
            return
        self.validating = True
        self.run_worker(self._run_validation(connections, hosts), group="validate")

    async def _run_validation(self, connections: HostStatusSource, hosts: list[Host]) -> None:
        what = hosts[0].name if len(hosts) == 1 else f"{len(hosts)} hosts"
        self.notify(f"Validating {what} (torch on the hosts: a minute or more)", timeout=5)
        try:
            rows, verdict = await measure_and_keep(
                connections,
                hosts,
                self.inventory.path,
                Plan(),
                self._validate_progress,
            )
        except ConsoleError as exc:
            self.notify(f"Validation failed: {exc}", severity="error")
            return
        finally:
            self.validating = False
            self.sub_title = self.SUB_TITLE  # None: the app's own again
        severity = SEVERITY.get(verdict.state, "error")
        self.notify(validation_notice(what, rows, verdict), severity=severity, timeout=15)
        from console.ui.screens.host_detail import HostDetailScreen

        for screen in self.app.screen_stack:
            if isinstance(screen, HostDetailScreen):
                screen.reread_validation()

    def _validate_progress(self, line: str) -> None:
        self.sub_title = f"validate: {line}"  # the header: every screen's place for it

    def _reconnect(self, name: str | None) -> None:
        connections = self.services.connections
        if connections is None:
            self.notify("Not connected to any host in this view", severity="warning")
            return
        connections.reconnect_now(name)
        self.notify(f"Reconnecting {name or 'every host that is not up'} now", timeout=3)
