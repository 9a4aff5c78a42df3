"""The logs screen's rough edges from a newcomer's first hour (issue 9), at 80x24 and
200x50: q goes back instead of quitting, j returns to the jobs screen, the steps table
hides with a footer key and is as tall as its rows, long lines wrap under their text,
the screen works at 80x24, and Steps/s and Lag fill in from the bundled examples' real
output (the PS example, standard library only, run here on loopback)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Footer
from textual.widgets._footer import FooterKey
from ui_fixtures import FROZEN_NOW

from console.inventory import Host, Inventory
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.logs.models import LogBatch, LogLine
from console.ui.app import DistConsoleApp
from console.ui.screens.jobs import JobsScreen
from console.ui.screens.logs import LogsScreen
from console.ui.widgets.log_view import LazyLogView
from console.ui.widgets.steps_table import StepsTable

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((200, 50), id="200x50")]
EXAMPLES = Path(__file__).resolve().parents[2] / "console" / "examples"
INVENTORY = Inventory(
    path="/srv/hosts.yaml",
    hosts=(Host(name="node0", address="10.0.0.10"), Host(name="node1", address="10.0.0.11")),
)
DDP = plan(make_spec(kind="ddp", program="example:ddp", gpus_per_host=2), INVENTORY, job_id="d-1")
PS = plan(make_spec(kind="ps", program="example:ps", ps=1, workers=2), INVENTORY, job_id="p-1")


def make_app() -> DistConsoleApp:
    return DistConsoleApp(INVENTORY, connections_factory=None, clock=lambda: FROZEN_NOW)


def ddp_batch(steps: int, extra: tuple[LogLine, ...] = ()) -> LogBatch:
    lines = [
        LogLine("d-1", f"node{rank // 2}", rank, rank % 2, "stdout",
                f"rank {rank} step {step}/{steps} loss 0.5 samples/s 128.0", FROZEN_NOW)
        for step in range(1, steps + 1) for rank in range(4)
    ]  # fmt: skip
    return LogBatch("node0", (*lines, *extra), received=FROZEN_NOW)


async def logs_from_jobs(pilot: Pilot[Any], job_plan: Any = DDP) -> LogsScreen:
    """The way a user gets there: the jobs screen, then a job's logs on top of it."""
    app = pilot.app
    assert isinstance(app, DistConsoleApp)
    await pilot.press("j")
    await pilot.pause()
    assert isinstance(app.screen, JobsScreen)
    screen = LogsScreen(job_plan, app.services, follow_hosts=False)
    await app.push_screen(screen)
    await pilot.pause()
    return screen


def footer_keys(screen: LogsScreen) -> dict[str, str]:
    return {k.key: k.description for k in screen.query_one(Footer).query(FooterKey)}


@pytest.mark.parametrize("size", SIZES)
async def test_q_goes_back_to_the_jobs_screen_and_does_not_quit(size: tuple[int, int]) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await logs_from_jobs(pilot)
        keys = footer_keys(app.screen)  # type: ignore[arg-type]
        assert (keys["q"], keys["j"]) == ("Back", "Jobs")
        await pilot.press("q")
        await pilot.pause()
        assert app.is_running
        assert isinstance(app.screen, JobsScreen)
        await pilot.press("q")  # on the jobs screen q is the app's: quit
        await pilot.pause()
    assert app.return_code == 0


@pytest.mark.parametrize("size", SIZES)
async def test_j_returns_to_the_jobs_screen_not_to_a_logs_screen(size: tuple[int, int]) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        first = await logs_from_jobs(pilot)
        jobs = app.screen_stack[-2]
        assert isinstance(jobs, JobsScreen)
        await pilot.press("j")
        await pilot.pause()
        assert app.screen is jobs
        assert first not in app.screen_stack
        # Another job's logs, then away and back with j: the jobs screen, each time.
        await app.push_screen(LogsScreen(PS, app.services, follow_hosts=False))
        await pilot.pause()
        await pilot.press("j")
        await pilot.pause()
        assert app.screen is jobs
        await pilot.press("g", "j")
        await pilot.pause()
        assert app.screen is jobs
        # Logs open, a look at the GPUs (g), back with j: the jobs screen, not the old
        # logs (which are closed: they no longer follow their hosts unseen).
        old = LogsScreen(DDP, app.services, follow_hosts=False)
        await app.push_screen(old)
        await pilot.pause()
        await pilot.press("g")
        await pilot.pause()
        assert not isinstance(app.screen, (LogsScreen, JobsScreen))
        await pilot.press("j")
        await pilot.pause()
        assert app.screen is jobs and old not in app.screen_stack
        await pilot.pause()
        assert not old.is_attached  # removed from the app, its workers with it
        # A dialog over the logs (help) does not close them.
        logs = LogsScreen(DDP, app.services, follow_hosts=False)
        await app.push_screen(logs)
        await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is logs


@pytest.mark.parametrize("size", SIZES)
async def test_steps_table_hides_with_a_footer_key_and_is_as_tall_as_its_rows(
    size: tuple[int, int],
) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        screen = await logs_from_jobs(pilot)
        screen.apply_batches([ddp_batch(5)])
        screen._refresh_steps()
        await pilot.pause()
        table = screen.query_one("#steps-table", StepsTable)
        assert table.row_count == 4
        assert table.size.height == 1 + 4  # its header and one row per rank, no more
        view = screen.query_one("#log-view", LazyLogView)
        assert footer_keys(screen)["s"] == "Steps"
        key = next(k for k in screen.query_one(Footer).query(FooterKey) if k.key == "s")
        assert key.region.right <= size[0]  # shown, not cut off the footer's end
        height_with_table = view.size.height
        await pilot.press("s")
        await pilot.pause()
        assert not table.display
        if size[0] < 140:  # below the log: hiding it gives its rows to the log
            assert view.size.height > height_with_table
        else:  # beside the log: hiding it gives its columns to the log
            assert view.size.width == size[0]
        await pilot.press("s")
        await pilot.pause()
        assert table.display and table.size.height == 5


@pytest.mark.parametrize("size", SIZES)
async def test_long_lines_wrap_under_their_text_not_under_the_prefix(
    size: tuple[int, int],
) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        screen = await logs_from_jobs(pilot)
        words = " ".join(f"word{i:03d}" for i in range(80))  # 639 characters
        long = LogLine("d-1", "node1", 3, 1, "stdout", words, FROZEN_NOW)
        screen.apply_batches([ddp_batch(2, (long,))])
        await pilot.press("w")
        await pilot.pause()
        view = screen.query_one("#log-view", LazyLogView)
        assert view.wrap
        rows = [view.render_line(y).text for y in range(view.size.height)]
        first = next(i for i, row in enumerate(rows) if "word000" in row)
        assert rows[first].startswith("node1 r3 │ word000")
        text_column = rows[first].index("word000")
        continued = rows[first + 1 :]
        assert len(continued) >= 2 and "word079" in "".join(continued)
        for row in continued:
            if not row.strip():
                break
            assert row[:text_column] == " " * (text_column - 2) + "│ "
            assert row[text_column] != " " or row[text_column + 1 :].strip()
        # Every character once, in order, across the rows.
        body = rows[first][text_column:] + "".join(
            row[text_column:] for row in continued if row.strip()
        )
        assert body.rstrip() == words
        await pilot.press("w")
        await pilot.pause()
        assert not view.wrap and view.virtual_size.height == len(screen.shown)


@pytest.mark.parametrize("size", SIZES)
async def test_the_screen_is_usable_at_its_size(size: tuple[int, int]) -> None:
    width, height = size
    app = make_app()
    async with app.run_test(size=size) as pilot:
        screen = await logs_from_jobs(pilot)
        screen.apply_batches([ddp_batch(30)])
        screen._refresh_steps()
        await pilot.pause()
        footer = screen.query_one(Footer)
        assert footer.region.y == height - 1 and footer.region.width == width
        view = screen.query_one("#log-view", LazyLogView)
        table = screen.query_one("#steps-table", StepsTable)
        summary = screen.query_one("#logs-summary")
        for part in (view, table, summary):
            assert part.region.bottom <= height - 1  # above the footer, nothing hidden
        assert view.size.height >= 10
        assert view.size.width >= min(width - 2, 120)  # the log keeps the screen's width
        assert table.size.width >= 50  # every column of the steps table fits
        assert "step 30/30" in view.render_line(view.size.height - 1).text
        # The newest line is on screen and the summary says where the job is.
        assert "rank 0 30/30" in str(summary.render())
        # A line wider than the view brings a scrollbar; the newest line stays in view.
        wide = LogLine("d-1", "node0", 0, 0, "stdout", "wide " + "y" * 300, FROZEN_NOW)
        screen.apply_batches([LogBatch("node0", (wide,), received=FROZEN_NOW)])
        await pilot.pause()
        await pilot.pause()
        assert view.show_horizontal_scrollbar
        last = view.scrollable_content_region.height - 1
        assert "│ wide yyy" in view.render_line(last).text


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def ps_example_output() -> list[str]:
    """Each worker's stdout from the real PS example (one ps task, two workers)."""
    cluster = {"ps": [f"127.0.0.1:{free_port()}"], "worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    program = [sys.executable, str(EXAMPLES / "ps_train.py"), "--steps", "8"]

    def env(kind: str, index: int) -> dict[str, str]:
        config = {"cluster": cluster, "task": {"type": kind, "index": index}}
        return dict(os.environ, TF_CONFIG=json.dumps(config))

    ps = subprocess.Popen(program, env=env("ps", 0), stdout=subprocess.DEVNULL)
    try:
        workers = [
            subprocess.Popen(program, env=env("worker", i), stdout=subprocess.PIPE, text=True)
            for i in range(2)
        ]
        outputs = [w.communicate(timeout=60)[0] for w in workers]
    finally:
        ps.terminate()
        ps.wait(timeout=10)
    assert all(w.returncode == 0 for w in workers)
    return outputs


@pytest.mark.parametrize("size", SIZES)
async def test_steps_per_second_and_lag_fill_in_from_the_examples_output(
    size: tuple[int, int], ps_example_output: list[str]
) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        screen = await logs_from_jobs(pilot, PS)
        lines = tuple(
            LogLine("p-1", f"node{index}", None, None, "stdout", text, FROZEN_NOW, "worker", index)
            for index, out in enumerate(ps_example_output)
            for text in out.splitlines()
        )
        # All in one batch, as a fast job's lines arrive: the rate is the printed one.
        screen.apply_batches([LogBatch("node0", lines, received=FROZEN_NOW)])
        screen._refresh_steps()
        await pilot.pause()
        table = screen.query_one("#steps-table", StepsTable)
        header = [str(column.label) for column in table.columns.values()]
        rows = [[cell.plain for cell in table.get_row_at(i)] for i in range(table.row_count)]
        assert [row[0] for row in rows] == ["worker0", "worker1"]
        for row in rows:
            assert row[header.index("Step")] == "8"
            assert float(row[header.index("Steps/s")]) > 0
            assert float(row[header.index("Samples/s")]) > 0
            assert row[header.index("Lag")] == "0"
