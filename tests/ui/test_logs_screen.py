"""The logs screen with Pilot: rank choice, search, filter mode, follow/pause, first
error, wrap, save, steps panel. Batches of LogLine are fed into the screen's update
method (the follower itself is tested over real sshd in tests/integration); the whole
path over real hosts is in test_logs_live.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable
from ui_fixtures import FROZEN_NOW

from console.inventory import Host, Inventory
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.logs.models import LogBatch, LogLine
from console.ui.app import DistConsoleApp
from console.ui.screens.logs import ChooseRanks, LogsScreen
from console.ui.widgets.log_view import LazyLogView

INVENTORY = Inventory(
    path="/srv/hosts.yaml",
    hosts=(Host(name="node0", address="10.0.0.10"), Host(name="node1", address="10.0.0.11")),
)
PLAN = plan(
    make_spec(kind="ddp", program="example:ddp", gpus_per_host=2), INVENTORY, job_id="demo-1"
)


def batch(start: int, count: int, *, error_at: int | None = None) -> LogBatch:
    """``count`` steps of 4 ranks (2 per host), optionally rank 3 failing at one step."""
    lines = []
    for step in range(start, start + count):
        for rank in range(4):
            host = f"node{rank // 2}"
            text = f"step {step} loss {1.0 / (step + 1):.4f} samples/s 128.0"
            lines.append(LogLine("demo-1", host, rank, rank % 2, "stdout", text, FROZEN_NOW))
            if error_at == step and rank == 3:
                lines.append(
                    LogLine("demo-1", host, 3, 1, "stderr", "RuntimeError: [boom]", FROZEN_NOW)
                )
    return LogBatch("node0", tuple(lines), received=FROZEN_NOW)


async def open_logs(pilot: Pilot[Any]) -> LogsScreen:
    app = pilot.app
    assert isinstance(app, DistConsoleApp)
    screen = LogsScreen(PLAN, app.services, follow_hosts=False)
    await app.push_screen(screen)
    await pilot.pause()
    screen.apply_batches([batch(0, 10), batch(10, 10, error_at=12)])
    await pilot.pause()
    return screen


def make_app() -> DistConsoleApp:
    return DistConsoleApp(INVENTORY, connections_factory=None, clock=lambda: FROZEN_NOW)


async def test_all_ranks_interleaved_then_chosen_ranks() -> None:
    app = make_app()
    async with app.run_test(size=(180, 50)) as pilot:
        screen = await open_logs(pilot)
        text = screen.shown_text()
        assert len(text) == 81  # 20 steps x 4 ranks + the error line
        assert text[0] == "node0 r0| step 0 loss 1.0000 samples/s 128.0"
        assert text[3].startswith("node1 r3| step 0")
        assert "node1 r3| RuntimeError: [boom]" in text  # brackets kept, not markup
        await pilot.press("r")
        await pilot.pause()
        chooser = app.screen
        assert isinstance(chooser, ChooseRanks)
        # Untick r0, r2 and r3: only r1 stays.
        await pilot.press("space", "down", "down", "space", "down", "space", "enter")
        await pilot.pause()
        assert screen.ranks == [1]
        assert {t.split("| ")[0] for t in screen.shown_text()} == {"node0 r1"}
        # New lines of other ranks do not show up while r1 is chosen.
        screen.apply_batches([batch(20, 1)])
        await pilot.pause()
        assert screen.shown_text()[-1] == "node0 r1| step 20 loss 0.0476 samples/s 128.0"


async def test_search_highlights_and_filter_mode_shows_context() -> None:
    app = make_app()
    async with app.run_test(size=(180, 50)) as pilot:
        screen = await open_logs(pilot)
        await pilot.press("slash", *"step 1[57] ", "enter")
        await pilot.pause()
        assert screen.search is not None and len(screen.matches) == 8
        assert screen.match_at == 0 and not screen.following
        await pilot.press("n")
        assert screen.match_at == 1
        await pilot.press("m")
        await pilot.pause()
        text = screen.shown_text()
        assert sum("step 15 " in t or "step 17 " in t for t in text) == 8
        assert any(t.startswith("···") for t in text)  # gaps between the shown parts
        assert len(text) < 40
        await pilot.press("m")
        await pilot.pause()
        assert len(screen.shown_text()) == 81


async def test_follow_pause_first_error_wrap_and_steps() -> None:
    app = make_app()
    async with app.run_test(size=(180, 50)) as pilot:
        screen = await open_logs(pilot)
        await pilot.press("f")
        assert not screen.following
        screen.apply_batches([batch(20, 2)])
        await pilot.pause()
        assert len(screen.shown_text()) == 81  # paused: the view holds still
        await pilot.press("f")
        await pilot.pause()
        assert len(screen.shown_text()) == 89
        await pilot.press("e")
        await pilot.pause()
        assert screen.shown_text()[screen.error_index] == "node1 r3| RuntimeError: [boom]"
        assert not screen.following
        view = screen.query_one("#log-view", LazyLogView)
        await pilot.press("w")
        assert view.wrap
        screen._refresh_steps()
        steps = screen.query_one("#steps-table", DataTable)
        assert steps.row_count == 4
        assert [c.plain for c in steps.get_row_at(3)[:3]] == ["r3", "node1", "21"]


async def test_ctrl_s_saves_what_is_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    app = make_app()
    async with app.run_test(size=(180, 50)) as pilot:
        screen = await open_logs(pilot)
        await pilot.press("ctrl+s")
        await pilot.pause()
    saved = (tmp_path / "demo-1-logs.txt").read_text().splitlines()
    assert saved == screen.shown_text()


async def test_a_firehose_reaches_the_view_in_ticks_with_nothing_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under a burst (TICK_BURST lines or more) the view takes new lines once per tick:
    the newest ``follow_append`` of them after a gap row, in order; the store has all.
    The tick is made long so that a loaded machine cannot reach it between two calls."""
    from console.logs.buffer import Gap
    from console.ui.screens import logs_ticks

    monkeypatch.setattr(logs_ticks, "VIEW_TICK_S", 2.0)
    app = make_app()
    async with app.run_test(size=(180, 50)) as pilot:
        screen = await open_logs(pilot)  # 81 lines: few, shown at once
        assert len(screen.shown) == 81
        for start in (100, 600, 1100):
            screen.apply_batches([batch(start, 500)])  # 2000 lines each: held for the tick
        assert len(screen.shown) == 81
        assert screen.store.total_received == 81 + 6000
        # Wait for the tick (a timer of the screen), not a fixed time.
        while len(screen.shown) == 81:
            await pilot.pause(0.05)
        tail = screen.shown[-screen.follow_append :]
        steps = [int(item.text.split()[1]) for item in tail if isinstance(item, LogLine)]
        assert len(steps) == screen.follow_append
        assert steps == sorted(steps) and steps[-1] == 1599
        gap = screen.shown[-screen.follow_append - 1]
        assert isinstance(gap, Gap) and gap.skipped == 6000 - screen.follow_append
        # Paused while lines are held: they stay out of the view; f shows the store's tail.
        screen.apply_batches([batch(1600, 500)])
        await pilot.press("f")
        assert not screen.following
        assert screen.shown_text()[-1] == "node1 r3| step 1599 loss 0.0006 samples/s 128.0"
        await pilot.press("f")
        await pilot.pause()
        assert screen.shown_text()[-1] == "node1 r3| step 2099 loss 0.0005 samples/s 128.0"


async def test_filter_mode_under_a_firehose_is_rebuilt_per_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In filter mode (m) a burst no longer filters the whole store again per batch (keys
    waited behind it): the view is rebuilt once, at the tick, with the newest matches."""
    from console.ui.screens import logs_ticks

    monkeypatch.setattr(logs_ticks, "VIEW_TICK_S", 2.0)
    app = make_app()
    async with app.run_test(size=(180, 50)) as pilot:
        screen = await open_logs(pilot)
        screen.set_search(r"step \d*7 ")
        screen.following = True  # set_search went to the first match
        await pilot.press("m")
        assert screen.filter_mode
        rebuilds = 0
        real_rebuild = screen.rebuild

        def counting_rebuild(focus_seq: int | None = None) -> None:
            nonlocal rebuilds
            rebuilds += 1
            real_rebuild(focus_seq)

        monkeypatch.setattr(screen.held, "_rebuild", counting_rebuild)
        monkeypatch.setattr(screen, "rebuild", counting_rebuild)
        screen.apply_batches([batch(100, 300)])  # 1200 lines, right after m: shown at once
        assert rebuilds == 1
        before = list(screen.shown)
        screen.apply_batches([batch(400, 300)])  # then held until the tick
        screen.apply_batches([batch(700, 300)])
        assert screen.shown == before and rebuilds == 1
        while screen.shown == before:  # the tick (a timer of the screen), not a fixed time
            await pilot.pause(0.05)
        assert rebuilds == 2
        from console.logs.buffer import Shown

        matched = [x.line.text for x in screen.shown if isinstance(x, Shown) and x.match]
        assert matched[-1] == "step 997 loss 0.0010 samples/s 128.0"
