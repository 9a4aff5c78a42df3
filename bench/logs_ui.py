"""bench/logs.py's ui mode: the real DistConsoleApp logs screen, headless, following
the writers' files while keys are timed from the key event to the painted frame."""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from common import rss_mb
from logs_parts import OnceChecker, Timeline, start_writers

from console.inventory import Inventory
from console.transport import ClusterConnections

KEYS = ("f", "slash", "enter", "pageup", "pagedown", "m", "r", "escape")


class PeakTrace:
    """BENCH_TRACEMALLOC=FILE: where the Python heap was at its highest (tracemalloc,
    every 0.5 s a snapshot when the traced size is a new high), written to FILE at exit.
    It slows the app several times over: its latencies are not comparable then."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.high = 0
        self.snapshot: tracemalloc.Snapshot | None = None

    def start(self) -> None:
        tracemalloc.start(8)
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        try:
            while True:
                await asyncio.sleep(0.5)
                now, _ = tracemalloc.get_traced_memory()
                if now > self.high:
                    self.high, self.snapshot = now, tracemalloc.take_snapshot()
        finally:
            self.report()

    def report(self) -> None:
        _, top = tracemalloc.get_traced_memory()
        lines = [f"tracemalloc: peak {top / 2**20:.0f} MiB, highest snapshot "
                 f"{self.high / 2**20:.0f} MiB; its biggest sites:"]  # fmt: skip
        for stat in self.snapshot.statistics("traceback")[:12] if self.snapshot else ():
            lines.append(f"  {stat.size / 2**20:7.1f} MiB {stat.count:9,d} blocks")
            lines += [f"      {line}" for line in stat.traceback.format(limit=4)]
        with open(self.path, "w") as handle:
            handle.write("\n".join(lines) + "\n")


async def run_ui(inventory: Inventory, out: str, args: argparse.Namespace) -> dict[str, Any]:
    from textual import events
    from textual.widgets import Input

    from console.jobs.models import JobKind, JobPlan, LogFile, RankLaunch
    from console.transport.base import HostState
    from console.ui.app import DistConsoleApp
    from console.ui.screens.logs import ChooseRanks, LogsScreen

    host = inventory.hosts[0].name
    checker = OnceChecker()

    class FrameCountingApp(DistConsoleApp):
        """Instrumentation only: the time every frame is ready for the terminal. Headless
        Textual skips making terminal bytes; done here, as a real terminal costs it."""

        frames: list[float] = []

        def _display(self, screen: Any, renderable: Any) -> None:
            if renderable is not None:
                renderable.render_segments(self.console)
                self.frames.append(time.perf_counter())
            super()._display(screen, renderable)

    class CheckedLogsScreen(LogsScreen):
        def apply_batches(self, batches: Any) -> None:
            for batch in batches:
                checker.feed(batch.lines)
            super().apply_batches(batches)

    launches = tuple(
        RankLaunch(host, "rank", r, (), {}, out, (LogFile(f"{out}/rank-{r}.out", "stdout",
                   "rank", rank=r, local_rank=r),), (r,))
        for r in range(args.ranks)
    )  # fmt: skip
    plan = JobPlan("bench", "bench", JobKind.DDP, args.ranks, launches, job_dirs={})
    app = FrameCountingApp(inventory)
    # Scrolls land at once instead of animating, so a key's effect is one frame.
    app.animation_level = "none"
    latencies: dict[str, list[float]] = {k: [] for k in KEYS}
    trace_to = os.environ.get("BENCH_TRACEMALLOC")
    peak = PeakTrace(trace_to) if trace_to else None
    async with app.run_test(size=(200, 50)) as pilot:
        if peak is not None:
            peak.start()
        deadline = time.monotonic() + 30
        while True:
            pool = app.connections
            if isinstance(pool, ClusterConnections) and pool[host].status.state is HostState.UP:
                break
            if time.monotonic() > deadline:
                raise SystemExit("the sshd host did not come up")
            await pilot.pause(0.1)
        conn = pool[host]
        screen = CheckedLogsScreen(plan, app.services, max_lines_per_rank=args.max_lines)
        await app.push_screen(screen)
        timeline = Timeline(args, lambda: screen.store.total_received)
        baseline = rss_mb()
        writers = await start_writers(conn, out, args, timeline.start_at)
        box = screen.query_one("#log-search", Input)

        async def key(name: str, char: str | None, shown: Callable[[], bool]) -> None:
            started = last_unseen = time.perf_counter()
            app.post_message(events.Key(name, char))
            while not shown():
                last_unseen = time.perf_counter()
                if last_unseen - started > 10:
                    raise SystemExit(
                        f"key {name}: the screen never showed it (focused {app.focused},"
                        f" view at {screen.view.scroll_offset}, following {screen.following},"
                        f" max {screen.view.max_scroll_y} size {screen.view.size}"
                        f" virtual {screen.view.virtual_size} screen {app.screen})"
                        f" target {screen.view.scroll_target_y} anim {app.animator._animations}"
                        f" level {app.animation_level} frames {len(app.frames)}"
                    )
                await asyncio.sleep(0.001)
            # The first frame painted after the change (not one painted before it).
            while not app.frames or app.frames[-1] < last_unseen:
                await asyncio.sleep(0.001)
            frame = next(t for t in app.frames if t >= last_unseen)
            latencies[name].append(1000 * (frame - started))

        async def keys_round(i: int) -> None:
            view = screen.view
            await key("f", "f", lambda: not screen.following)
            await key("f", "f", lambda: screen.following)
            await key("slash", "/", lambda: box.has_class("-open") and box.has_focus)
            pattern = f"{i % 10}1 loss"  # every 100th line of each rank
            for ch in pattern:
                app.post_message(events.Key("space" if ch == " " else ch, ch))
            while box.value != pattern:
                await asyncio.sleep(0.001)
            searched = lambda: bool(screen.search and screen.search.pattern == pattern)  # noqa: E731
            await key("enter", "\r", searched)
            y = view.scroll_offset.y
            if y > 0:
                await key("pageup", None, lambda: view.scroll_offset.y < y)
            else:
                await key("pagedown", None, lambda: view.scroll_offset.y > y)
            await key("m", "m", lambda: screen.filter_mode)
            await key("m", "m", lambda: not screen.filter_mode)
            await key("r", "r", lambda: isinstance(app.screen, ChooseRanks))
            await key("escape", "\x1b", lambda: app.screen is screen)
            await key("f", "f", lambda: screen.following)

        window = asyncio.create_task(timeline.window())
        await asyncio.sleep(max(0.0, timeline.start_at - time.time()) + 1.0)
        rounds = 0
        while not window.done():
            await keys_round(rounds)
            rounds += 1
        counts = await writers
        await timeline.drain(sum(counts))
        result = timeline.result(counts, checker, baseline)
        result["kept"] = len(screen.store)
        result["latency_ms"] = latencies
        result["rounds"] = rounds
    return result
