"""The GPU screen shows health verdicts (issue 24): a failing GPU's dense cell says X and
its panel line says why, the attention view lists hosts with failing GPUs first (then
warning ones), a host whose nvidia-smi does not answer says so instead of a blank panel,
and the host detail lists the health events with their times. Views are built here from
decoded health readings (the sampler's own are tested in tests/unit/test_health_*)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Static
from ui_fixtures import FROZEN_NOW

from console.inventory import Host, Inventory
from console.probe.health import clock
from console.probe.health_models import GpuHealth, HostHealth, XidEvent
from console.probe.models import GpuSample, HostSample, HostView
from console.transport.base import HostState, HostStatus
from console.ui.app import DistConsoleApp
from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.host_detail import HostDetailScreen
from console.ui.widgets.gpu_panel import HostPanel

NAMES = ("node1", "node2", "node3", "node4", "node5")
OK = GpuHealth(0, None, 0, 0, 0, 0, "No", "No", "No", None, 0, 5, 5, 16, 16)


def inventory() -> Inventory:
    hosts = tuple(Host(name=n, address=f"10.0.1.{i}", user="alice") for i, n in enumerate(NAMES))
    return Inventory(path="/srv/cluster/hosts.yaml", hosts=hosts)


def gpus() -> tuple[GpuSample, ...]:
    return tuple(
        GpuSample(
            i,
            name="NVIDIA H200",
            utilization_gpu=40,
            memory_used_mib=1000,
            memory_total_mib=143771,
            temperature_c=50,
        )
        for i in range(2)
    )


def health(*faulty: GpuHealth, xids: tuple[XidEvent, ...] = ()) -> HostHealth:
    by_index = {g.index: g for g in faulty}
    rows = tuple(by_index.get(i, replace(OK, index=i)) for i in range(2))
    return HostHealth("nvidia-smi", FROZEN_NOW, rows, xids)


def views() -> dict[str, HostView]:
    def view(name: str, h: HostHealth, gpu_list: tuple[GpuSample, ...] | None = None) -> HostView:
        shown = gpus() if gpu_list is None else gpu_list
        sample = HostSample(name, FROZEN_NOW, "nvidia-smi", shown, health=h, cpu_percent=5.0)
        return HostView(name, HostState.UP, "", sample, False, FROZEN_NOW)

    remap = replace(OK, index=1, remapped_rows_pending="Yes", ecc_uncorrected_volatile=2)
    narrow = replace(OK, index=0, pcie_width=8)
    xid = XidEvent(FROZEN_NOW - 30, 79, "0000:83:00", 1, "GPU has fallen off the bus.", "kmsg")
    hung = HostHealth(
        "nvidia-smi", None, error="nvidia-smi not answering", error_since=FROZEN_NOW - 40
    )
    return {
        "node1": view("node1", health(narrow)),  # warns
        "node2": view("node2", health()),
        "node3": view("node3", health()),
        "node4": view("node4", health(remap, xids=(xid,))),  # fails
        "node5": view("node5", hung, gpu_list=()),  # its nvidia-smi does not answer
    }


async def open_screen(app: DistConsoleApp, pilot: Pilot[Any]) -> ClusterScreen:
    await pilot.press("g")
    await pilot.pause()
    app.apply_statuses([HostStatus(n, HostState.UP, since=FROZEN_NOW) for n in NAMES])
    app.apply_views(views())
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, ClusterScreen)
    return screen


def make_app() -> DistConsoleApp:
    return DistConsoleApp(inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)


async def test_panels_mark_failing_gpus_and_the_attention_view_lists_them_first() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await open_screen(app, pilot)
        assert not screen.dense
        panel = screen.query_one("#panels").children[3]
        assert isinstance(panel, HostPanel) and panel.host.name == "node4"
        text = "\n".join(line.plain for line in panel.lines())
        assert "⚠ FAIL 2 uncorrectable ECC error(s) since the last reset +2" in text
        hung = next(p for p in screen.query(HostPanel) if p.host.name == "node5")
        assert "✗ FAIL nvidia-smi not answering (since " in "\n".join(
            ln.plain for ln in hung.lines()
        )
        await pilot.press("a")
        await pilot.pause()
        # Failing hosts first (inventory order among them), then the warning one.
        assert screen.visible_hosts() == ["node4", "node5", "node1"]
        await pilot.press("a")
        await pilot.pause()
        assert screen.visible_hosts() == list(NAMES)


async def test_dense_view_marks_x_and_lists_failing_hosts_first_in_attention() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await open_screen(app, pilot)
        await pilot.press("v")
        await pilot.pause()
        assert screen.dense
        lines = [screen.grid.line_text(i) for i in range(len(screen.grid.grid.lines))]
        text = "\n".join(lines)
        assert "node4 ▒▒ ▒▒X" in text, text  # GPU 1 fails: X; GPU 0 is fine
        assert "node1 ▒▒!▒▒ " in text, text  # GPU 0 warns: !
        assert "node5 ✗ nvi…" in text, text  # clipped to its cells: never blank
        legend = str(screen.query_one("#grid-legend", Static).render())
        assert "X health check fails" in legend
        await pilot.press("a")
        await pilot.pause()
        assert screen.grid.visible_hosts() == ["node4", "node5", "node1"]


async def test_host_detail_lists_health_events_with_their_times() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await open_screen(app, pilot)
        panel = next(p for p in screen.query(HostPanel) if p.host.name == "node4")
        panel.focus()
        await pilot.press("enter")
        await pilot.pause()
        detail = app.screen
        assert isinstance(detail, HostDetailScreen)
        header = str(detail.query_one("#detail-host", Static).render())
        lines = [ln for ln in header.splitlines() if ln.startswith("Health: ")]
        assert len(lines) == 3, header
        xid_at, read_at = clock(FROZEN_NOW - 30), clock(FROZEN_NOW)
        assert lines[0] == (
            f"Health: {xid_at} GPU 1 FAIL Xid 79 (GPU has fallen off the bus): "
            "GPU has fallen off the bus."
        )
        assert lines[1:] == [
            f"Health: {read_at} GPU 1 FAIL 2 uncorrectable ECC error(s) since the last reset",
            f"Health: {read_at} GPU 1 FAIL row remap pending (reset the GPU)",
        ]
