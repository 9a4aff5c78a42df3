"""The cluster (GPU) screen with Pilot on fixed views: filter, attention view, detail.

The views are fixed HostView values fed into the screen's update method (this machine
has no GPU); the same screen over real sshd hosts and the real sampler is exercised in
test_cluster_live.py.
"""

from __future__ import annotations

from textual.widgets import DataTable, Static
from ui_fixtures import FROZEN_NOW, gpu_inventory, gpu_views

from console.ui.app import DistConsoleApp
from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.host_detail import HostDetailScreen
from console.ui.widgets.gpu_panel import HostPanel, bar, sparkline


def make_app() -> DistConsoleApp:
    return DistConsoleApp(gpu_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)


async def open_gpus(app: DistConsoleApp, pilot, steps: int = 3) -> ClusterScreen:  # type: ignore[no-untyped-def]
    await pilot.press("g")
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, ClusterScreen)
    for step in range(steps):
        app.apply_views(gpu_views(step))
    await pilot.pause()
    return screen


def panel_text(screen: ClusterScreen, name: str) -> str:
    panel = screen.query_one(f"#panel-{name}", HostPanel)
    return panel.render().plain


async def test_panels_show_gpus_processes_and_greyed_down_host() -> None:
    app = make_app()
    async with app.run_test(size=(160, 60)) as pilot:
        screen = await open_gpus(app, pilot)
        text = panel_text(screen, "node0")
        assert "A100-SXM4-80GB" in text and "resnet-ddp r0" in text
        assert "pid 4100" in text and "python train.py" in text
        assert text.count("\n") >= 5  # host figures, 4 GPUs, processes
        node1 = panel_text(screen, "node1")
        assert "91°C" in node1 and "hot" in node1 and "memory full" in node1
        assert "n/r" in node1  # power not reported: never shown as 0
        down = screen.query_one("#panel-node3", HostPanel)
        assert down.has_class("-down")
        assert "last seen 2m ago" in str(down.border_subtitle)
        assert "keepalive timeout" in str(down.border_subtitle)
        summary = str(screen.query_one("#cluster-summary", Static).render())
        assert "4 hosts (3 up, 1 down)" in summary and "8 GPUs: 5 busy, 3 idle, 1 hot" in summary
        # History: one sparkline sample per new sample time, three so far.
        assert len(screen.query_one("#panel-node0", HostPanel).history[0]) == 3


async def test_slash_filters_by_name_or_tag_and_escape_clears() -> None:
    app = make_app()
    async with app.run_test(size=(160, 60)) as pilot:
        screen = await open_gpus(app, pilot)
        await pilot.press("slash")
        await pilot.press(*"rack1")
        await pilot.pause()
        assert screen.visible_hosts() == ["node0", "node3"]
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.focused, HostPanel)  # keys go back to the panels
        assert "filter: 'rack1'" in str(screen.query_one("#cluster-summary", Static).render())
        await pilot.press("slash")
        await pilot.press("ctrl+u", *"node2")
        await pilot.pause()
        assert screen.visible_hosts() == ["node2"]
        await pilot.press("escape")
        await pilot.pause()
        assert screen.visible_hosts() == ["node0", "node1", "node2", "node3"]


async def test_attention_view_shows_only_gpus_and_hosts_that_need_a_look() -> None:
    app = make_app()
    async with app.run_test(size=(160, 60)) as pilot:
        screen = await open_gpus(app, pilot)
        await pilot.press("a")
        await pilot.pause()
        # node2 is idle with nothing of ours on it: hidden; node3 is down: shown.
        assert screen.visible_hosts() == ["node0", "node1", "node3"]
        node0 = panel_text(screen, "node0")
        gpu_lines = [line for line in node0.splitlines() if "A100" in line]
        assert len(gpu_lines) == 1 and "idle under a job" in gpu_lines[0]
        node1 = [line for line in panel_text(screen, "node1").splitlines() if "A100" in line]
        assert len(node1) == 1 and "hot" in node1[0]
        await pilot.press("a")
        await pilot.pause()
        assert screen.visible_hosts() == ["node0", "node1", "node2", "node3"]
        assert len([ln for ln in panel_text(screen, "node0").splitlines() if "A100" in ln]) == 4


async def test_enter_opens_the_host_detail_with_every_gpu_and_process() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await open_gpus(app, pilot)
        await pilot.press("down")  # node0 -> node1
        await pilot.pause()
        assert isinstance(app.focused, HostPanel) and app.focused.host.name == "node1"
        await pilot.press("enter")
        await pilot.pause()
        detail = app.screen
        assert isinstance(detail, HostDetailScreen) and detail.host.name == "node1"
        gpus = detail.query_one("#detail-gpus", DataTable)
        processes = detail.query_one("#detail-processes", DataTable)
        assert gpus.row_count == 2 and processes.row_count == 1
        assert [c.plain for c in processes.get_row_at(0)[1:3]] == ["777", "bob"]
        row = gpus.get_row_at(1)
        assert "n/r" in row[6].plain  # power draw not reported
        # A new batch from the monitor's inbox reaches the open detail screen.
        before = gpus.get_row_at(1)[2].plain
        app.views_inbox.put(gpu_views(5))
        await pilot.pause()
        assert gpus.get_row_at(1)[2].plain != before  # node1 GPU 1 utilization moved
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is screen


def test_bars_and_sparklines() -> None:
    assert bar(0.5, 10) == "█████░░░░░"
    assert bar(None, 4) == "····"
    assert bar(1.7, 4) == "████"
    line = sparkline([0.0, 50.0, 100.0, None], width=6)
    assert line == "  ▁▄█ "
