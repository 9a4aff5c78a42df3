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


def _mallinfo() -> tuple[float, float]:
    """(in use, free but held) by malloc, MiB; (0, 0) without glibc."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                     "uordblks", "fordblks", "keepcost")]  # fmt: skip

    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return 0.0, 0.0
    libc.mallinfo2.restype = MallInfo2
    info = libc.mallinfo2()
    return (info.uordblks + info.hblkhd) / 2**20, info.fordblks / 2**20


def _ssh_buffered() -> str:
    """Bytes asyncssh holds for each open process: its stream's buffer and its channel's
    (diagnostics only: walks the GC's objects)."""
    import gc

    import asyncssh

    out = []
    for obj in gc.get_objects():
        if isinstance(obj, asyncssh.SSHClientProcess):
            chan = obj.channel
            held = sum(len(d) for d, _ in chan._recv_buf if isinstance(d, bytes | str))
            out.append(f"{obj._recv_buf_len / 2**20:.1f}+{held / 2**20:.1f}")
    return "  ssh " + " ".join(out)


async def memory_log(path: str, screen: Any) -> None:
    """BENCH_MEMLOG=FILE: every 0.5 s, RSS and malloc's in-use / free, lines received."""
    with open(path, "w") as handle:
        t0 = time.monotonic()
        while True:
            used, free = _mallinfo()
            ssh = _ssh_buffered() if os.environ.get("BENCH_MEMLOG_SSH") else ""
            handle.write(f"{time.monotonic() - t0:6.1f} s  rss {rss_mb():6.0f}  malloc used"
                         f" {used:6.0f} free {free:6.0f}  received {screen.store.total_received}"
                         f"  kept {len(screen.store)}  chunks {screen.store.chunk_count()}"
                         f"  text {screen.store.text_bytes() / 2**20:.0f} MiB{ssh}\n")  # fmt: skip
            handle.flush()
            await asyncio.sleep(0.5)


def memory_now(text_chars: int) -> dict[str, float]:
    """RSS at the end, what malloc holds in use, and RSS once malloc gave back its free
    pages: tells live data from the allocator's free-but-kept memory (fragmentation)."""
    import ctypes
    import gc

    gc.collect()
    out = {"end_mb": rss_mb(), "text_mb": text_chars / 2**20}
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return out

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                     "uordblks", "fordblks", "keepcost")]  # fmt: skip

    libc.mallinfo2.restype = MallInfo2
    info = libc.mallinfo2()
    out["malloc_used_mb"] = (info.uordblks + info.hblkhd) / 2**20
    out["malloc_free_mb"] = info.fordblks / 2**20
    libc.malloc_trim(0)
    out["trimmed_mb"] = rss_mb()
    return out


async def run_ui(inventory: Inventory, out: str, args: argparse.Namespace) -> dict[str, Any]:
    from textual import events
    from textual.widgets import Input

    from console.jobs.models import JobKind, JobPlan, LogFile, RankLaunch
    from console.transport.base import HostState
    from console.ui.app import DistConsoleApp, tune_collector

    tune_collector()  # as distconsole's entry point does
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
        memlog_to = os.environ.get("BENCH_MEMLOG")
        memlog = asyncio.create_task(memory_log(memlog_to, screen)) if memlog_to else None
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
        result.update(memory_now(screen.store.text_bytes()))
        if memlog is not None:
            memlog.cancel()
        result["latency_ms"] = latencies
        result["rounds"] = rounds
    return result
