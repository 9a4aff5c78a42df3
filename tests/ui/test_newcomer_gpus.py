"""The GPU screen's rough edges from a newcomer's first hour (issue 9), at 80x24 and 200x50:
column headers, a down host that says why and since when, the attention view and the
filter saying when nothing matches, GPU names shown whole where there is room,
sparklines as wide as the room. Pilot drives the real app on fixed views (no GPU here);
the down host's reason comes from the real transport refusing a real connection."""

from __future__ import annotations

import socket
import time
from dataclasses import replace
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Footer, Static
from ui_fixtures import FROZEN_NOW, gpu_inventory, gpu_views

from console.inventory import Host, Inventory
from console.probe.models import HostView
from console.settings import make_settings
from console.transport.base import HostState, HostStatus
from console.ui.app import DistConsoleApp
from console.ui.screens.cluster import ClusterScreen
from console.ui.widgets.gpu_columns import GpuColumnsHeader
from console.ui.widgets.gpu_panel import HostPanel

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((200, 50), id="200x50")]
LONG_NAME = "NVIDIA RTX 6000 Ada Generation"


def make_app(inventory: Inventory | None = None) -> DistConsoleApp:
    return DistConsoleApp(
        inventory or gpu_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW
    )


async def open_gpus(
    app: DistConsoleApp, pilot: Pilot[Any], views: list[dict[str, HostView]] | None = None
) -> ClusterScreen:
    await pilot.press("g")
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, ClusterScreen)
    for batch in views if views is not None else [gpu_views(step) for step in range(3)]:
        app.apply_views(batch)
    await pilot.pause()
    return screen


def screen_lines(app: DistConsoleApp) -> list[str]:
    """What the terminal shows, one string per row."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def panel_text(screen: ClusterScreen, name: str) -> str:
    return screen.query_one(f"#panel-{name}", HostPanel).render().plain


@pytest.mark.parametrize("size", SIZES)
async def test_gpu_columns_have_headers_over_their_figures(size: tuple[int, int]) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await open_gpus(app, pilot)
        lines = screen_lines(app)
        header = next(line for line in lines if " GPU " in line)
        for heading in ("#", "GPU", "util", "memory", "temp", "power", "alerts"):
            assert heading in header
        gpu_line = next(line for line in lines if " 0 A100-SXM4-80GB" in line)
        # The headings sit over their figures: GPU over the name, temp over the °C.
        assert header.index("GPU") == gpu_line.index("A100")
        assert header.index("temp") + len("temp") == gpu_line.index("°C") + len("°C")
        assert isinstance(app.screen, ClusterScreen)
        shown = app.screen.query_one(GpuColumnsHeader)
        assert shown.columns == app.screen.query_one("#panel-node0", HostPanel).columns


@pytest.mark.parametrize("size", SIZES)
async def test_a_host_without_a_sample_says_its_state_why_and_since_when(
    size: tuple[int, int],
) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        views = gpu_views()
        del views["node2"]  # node2 never sampled: only its connection status is known
        screen = await open_gpus(app, pilot, [views])
        app.apply_statuses(
            [
                HostStatus(
                    "node2",
                    HostState.DOWN,
                    reason="connection refused (10.0.0.12:22)",
                    since=FROZEN_NOW - 95,
                )
            ]
        )
        screen.apply_statuses(app.store.statuses.values())
        await pilot.pause()
        text = panel_text(screen, "node2")
        assert text == "down since 1m ago: connection refused (10.0.0.12:22)"
        assert "waiting" not in text
        panel = screen.query_one("#panel-node2", HostPanel)
        assert panel.has_class("-down") and "down" in str(panel.border_title)


@pytest.mark.parametrize("size", SIZES)
async def test_a_refused_host_shows_the_transports_reason_on_its_panel(
    size: tuple[int, int],
) -> None:
    # A real connection to a closed port: the reason is the transport's own words, and
    # the panel picks it up from the store by itself (no sample will ever come).
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    inventory = Inventory(
        path="/tmp/hosts.yaml", hosts=(Host(name="gone", address="127.0.0.1", port=port),)
    )
    app = DistConsoleApp(inventory, settings=make_settings(monitor_interval_s=None))
    async with app.run_test(size=size) as pilot:
        await pilot.press("g")
        screen = app.screen
        assert isinstance(screen, ClusterScreen)
        panel = screen.query_one("#panel-gone", HostPanel)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not panel.render().plain.startswith("down"):
            await pilot.pause(0.2)
        text = panel.render().plain
        status = app.store.statuses["gone"]
        assert status.state is HostState.DOWN and status.reason
        assert text.startswith("down since ") and status.reason in text
        assert "waiting for the first sample" not in text


@pytest.mark.parametrize("size", SIZES)
async def test_filter_says_when_no_host_matches_and_escape_brings_them_back(
    size: tuple[int, int],
) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        screen = await open_gpus(app, pilot)
        no_match = screen.query_one("#no-match", Static)
        assert not no_match.display
        await pilot.press("slash", *"xyz")
        await pilot.pause()
        assert screen.visible_hosts() == []
        assert no_match.display
        assert str(no_match.render()) == "no host matches 'xyz' (Esc clears the filter)"
        assert any("no host matches 'xyz'" in line for line in screen_lines(app))
        await pilot.press("escape")
        await pilot.pause()
        assert screen.visible_hosts() == ["node0", "node1", "node2", "node3"]
        assert not no_match.display
        await pilot.press("slash", *"rack2", "enter")
        await pilot.pause()
        assert screen.visible_hosts() == ["node1"]
        assert isinstance(app.focused, HostPanel)


@pytest.mark.parametrize("size", SIZES)
async def test_attention_view_shows_what_needs_a_look_or_says_nothing_does(
    size: tuple[int, int],
) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        screen = await open_gpus(app, pilot)
        footer = screen.query_one(Footer)
        assert footer.region.bottom == size[1]  # the footer is on screen
        await pilot.press("a")
        await pilot.pause()
        assert screen.visible_hosts() == ["node0", "node1", "node3"]
        node0 = [ln for ln in panel_text(screen, "node0").splitlines() if "A100" in ln]
        assert len(node0) == 1 and "idle under a job" in node0[0]
        # On screen, whole: the alerts come before anything a narrow panel cuts.
        shown = "\n".join(screen_lines(app))
        assert "⚠ idle under a job" in shown and "⚠ hot, memory full" in shown
        assert "ATTENTION VIEW" in shown  # the summary says so first, even at 80 columns
        # The spare host needs nothing: the filter and the attention view leave no host.
        await pilot.press("slash", *"spare", "enter")
        await pilot.pause()
        assert screen.visible_hosts() == []
        no_match = str(screen.query_one("#no-match", Static).render())
        assert no_match == "no host matches 'spare' and needs attention (a: every host)"
        await pilot.press("a")
        await pilot.pause()
        assert screen.visible_hosts() == ["node2"]


@pytest.mark.parametrize("size", SIZES)
async def test_attention_view_of_a_healthy_cluster_says_so(size: tuple[int, int]) -> None:
    spare = gpu_inventory().hosts[2]
    app = make_app(Inventory(path="/srv/cluster/hosts.yaml", hosts=(spare,)))
    async with app.run_test(size=size) as pilot:
        screen = await open_gpus(app, pilot)
        await pilot.press("a")
        await pilot.pause()
        assert screen.visible_hosts() == []
        assert any("no host needs attention (a: every host)" in ln for ln in screen_lines(app))


def with_gpu_name(views: dict[str, HostView], name: str) -> dict[str, HostView]:
    out = {}
    for host, view in views.items():
        sample = view.sample
        if sample is not None:
            gpus = tuple(replace(g, name=name) for g in sample.gpus)
            view = replace(view, sample=replace(sample, gpus=gpus))
        out[host] = view
    return out


@pytest.mark.parametrize("size", SIZES)
async def test_gpu_names_are_whole_where_there_is_room(size: tuple[int, int]) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        screen = await open_gpus(app, pilot)
        # A100-SXM4-80GB (14) is whole even at 80 columns (it was cut at 16 before only
        # for longer names; now the column is as wide as the longest name).
        assert " 0 A100-SXM4-80GB " in panel_text(screen, "node0")
        app.apply_views(with_gpu_name(gpu_views(9), LONG_NAME))
        await pilot.pause()
        line = next(ln for ln in panel_text(screen, "node2").splitlines() if ln.startswith(" 0"))
        if size[0] >= 120:
            assert "RTX 6000 Ada Generation " in line
        else:
            assert "RTX 6000" in line  # cut to leave room for the figures and alerts
        panel = screen.query_one("#panel-node2", HostPanel)
        assert all(len(ln) <= panel.size.width for ln in panel_text(screen, "node2").splitlines())


@pytest.mark.parametrize("size", SIZES)
async def test_sparklines_use_the_width(size: tuple[int, int]) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        screen = await open_gpus(app, pilot, [gpu_views(step) for step in range(120)])
        panel = screen.query_one("#panel-node0", HostPanel)
        columns = panel.columns
        history = len(panel.history[0])
        assert history == 120
        line = next(ln for ln in panel_text(screen, "node0").splitlines() if ln.startswith(" 0"))
        spark = sum(ch in "▁▂▃▄▅▆▇█" for ch in line[60:])
        if size[0] >= 200:
            assert columns.spark >= 80 and spark >= 80  # was 16 whatever the width
        else:
            assert columns.spark == 0  # no room: the figures and the alerts come first
        assert len(line) <= panel.size.width
