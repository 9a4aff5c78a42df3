"""The cluster (GPU) screen's cost: the real ``DistConsoleApp`` headless on N demo hosts.

N embedded demo hosts x 8 simulated GPUs at 1 Hz, served by a separate
``distconsole demo --serve`` process (SSH servers and the samplers on the "hosts" are
not charged to the console). Each N runs in its own console process (``--worker``) that
opens the real app under Textual's ``run_test`` (headless), switches to the cluster
screen at once and measures:

- first frame: from creating the app to the first screen update at which every host
  panel holds a sample ("connected" = every connection up, "data" = every host's first
  sample reached the app, both on the same clock);
- console CPU % of one core over a steady window (everything in the console process:
  SSH client, JSON decoding, batching, layout and paint) that starts 3 s after the
  console's first scan of every host for jobs (which follows the first frame; the next
  is 120 s later), and per batch the time spent applying views and painting (median /
  max);
- peak RSS of the console process;
- keypress to screen: a key event sent the way a terminal's would be (through the
  driver), until the first screen update showing its effect: ``a`` (attention view on and
  off) and ``/`` then typing a filter one character at a time; median and max;
- the demo hosts' CPU % (server process and its samplers) over the same window.

Headless Textual skips turning screen updates into terminal bytes; the bench does that
step itself (to a string) so its cost is counted as it would be on a real terminal.

    python bench/cluster_ui.py [--hosts 8,32,64] [--duration 20] [--size 200x60] [--repeat 1]

``BENCH_METRICS=S`` turns the console's Prometheus endpoint on (``--metrics-listen``) and
scrapes it every S seconds from a thread of the console's process.

``BENCH_PROFILE=FILE`` writes a cProfile of the console's event-loop thread from creating
the app to the first frame to FILE, and of the steady window to FILE.steady (one N; the
profiler slows the console, so that run's figures are not comparable).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster_ui_tables import print_tables
from common import (
    GPUS_PER_HOST,
    cpu_s,
    demo_cluster,
    demo_host_counts,
    gpu_inventory,
    peak_rss_mib,
    positive_float,
    run_json,
    tree_cpu_s,
)

from console.inventory import Inventory

WARMUP_S = 3.0


def _size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size like 200x60: {text!r}") from None
    if width < 40 or height < 10:
        raise argparse.ArgumentTypeError(f"at least 40x10, got {text!r}")
    return width, height


class Probe:
    """Hooks on the app: every screen update (made into terminal bytes, timed) and the
    views batches; waiters resolved at the first update where their condition holds."""

    def __init__(self, app: Any) -> None:
        from textual._compositor import CompositorUpdate

        self.app = app
        self.updates = 0
        self.apply_ms: list[float] = []
        self.paint_ms: list[float] = []
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[float]]] = []
        display = app._display

        def timed_display(screen: Any, renderable: Any) -> None:
            display(screen, renderable)
            if isinstance(renderable, CompositorUpdate):
                renderable.render_segments(app.console)  # what a real terminal would get
            self.updates += 1
            now = time.perf_counter()
            for waiter in list(self._waiters):
                check, future = waiter
                if not future.done() and check():
                    future.set_result(now)
                    self._waiters.remove(waiter)

        app._display = timed_display
        screen = app.cluster_screen
        apply_views = screen.apply_views

        def timed_apply(batch: Any) -> None:
            t = time.perf_counter()
            apply_views(batch)
            self.apply_ms.append(1000 * (time.perf_counter() - t))

        screen.apply_views = timed_apply
        on_timer_update = screen._on_timer_update

        def timed_update() -> None:
            t = time.perf_counter()
            on_timer_update()
            self.paint_ms.append(1000 * (time.perf_counter() - t))

        # The screen makes its update timer lazily, on its first refresh: it takes this.
        screen._on_timer_update = timed_update

    def when(self, check: Callable[[], bool]) -> asyncio.Future[float]:
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiters.append((check, future))
        return future


def _send_key(app: Any, key: str, char: str | None) -> None:
    from textual import events

    event = events.Key(key, char)
    event.set_sender(app)
    app._driver.send_message(event)


async def _key_latency(
    app: Any, probe: Probe, key: str, char: str | None, check: Callable[[], bool]
) -> float:
    done = probe.when(check)
    sent = time.perf_counter()
    _send_key(app, key, char)
    shown = await asyncio.wait_for(done, 10)
    await asyncio.sleep(0.05)
    return 1000 * (shown - sent)


async def run_worker(
    inventory: Inventory, size: tuple[int, int], duration: float, server_pids: Sequence[int]
) -> dict[str, Any]:
    from console.ui.app import DistConsoleApp, tune_collector

    tune_collector()  # as distconsole's entry point does

    profile_to = os.environ.get("BENCH_PROFILE")
    profiler = cProfile.Profile() if profile_to else None
    # The hosts' CPU first: walking their process trees is this process's own work, not
    # the console's (at 256 hosts a walk is ~50 ms).
    hosts_start = tree_cpu_s(server_pids)
    cpu_start = cpu_s()
    started = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    app = DistConsoleApp(inventory)
    scraping = _metrics_on(app)
    screen = app.cluster_screen
    result: dict[str, Any] = {}

    def all_sampled() -> bool:
        # What the screen shows (dense grid or host panels) is the store's views, applied
        # before the paint this is checked at.
        views = screen.views
        return len(views) == len(inventory.hosts) and all(v.sample for v in views.values())

    async with app.run_test(size=size) as pilot:
        probe = Probe(app)
        first = probe.when(lambda: app.screen is screen and all_sampled())
        result["app_s"] = time.perf_counter() - started
        _send_key(app, "g", "g")
        # When the first / every host was connected and sampled (polled every 5 ms).
        timeline: dict[str, float] = {}

        def mark(name: str, now: float) -> None:
            timeline.setdefault(name, now - started)

        while not first.done() and time.perf_counter() - started < 60:
            now = time.perf_counter()
            pool = app.connections
            if pool is not None:
                up = [s.state.value == "up" for s in pool.statuses().values()]
                if any(up):
                    mark("first_up_s", now)
                if all(up):
                    mark("connected_s", now)
            monitor = app.monitor
            if monitor is not None:
                sampled = [v.sample is not None for v in monitor.views().values()]
                if any(sampled):
                    mark("first_data_s", now)
                if all(sampled):
                    mark("data_s", now)
            await asyncio.sleep(0.005)
        result.update(timeline)
        result["first_frame_s"] = (await first) - started if first.done() else None
        if profiler is not None and profile_to:
            profiler.disable()
            profiler.dump_stats(profile_to)
        # CPU seconds spent until then: the console's own, and the hosts' (SSH servers and
        # starting samplers, which on a real cluster run on the hosts' own CPUs).
        result["first_console_cpu_s"] = cpu_s() - cpu_start
        result["first_hosts_cpu_s"] = tree_cpu_s(server_pids) - hosts_start

        # The console's first scan of every host for jobs follows the first frame; the
        # next is 120 s later. The steady window starts after it (its cost is printed).
        jobs, sweep_cpu = app.jobs, cpu_s()
        while jobs is not None and not jobs.sweeps_done and time.perf_counter() - started < 90:
            await asyncio.sleep(0.02)
        if jobs is not None and jobs.sweeps_done:
            result["sweep_s"] = time.perf_counter() - started
            result["sweep_cpu_s"] = cpu_s() - sweep_cpu
        await asyncio.sleep(WARMUP_S)
        probe.apply_ms.clear()
        probe.paint_ms.clear()
        host0 = tree_cpu_s(server_pids)  # before the console's CPU reading, as above
        updates0, cpu0 = probe.updates, cpu_s()
        steady = cProfile.Profile() if profile_to else None
        if steady is not None:
            steady.enable()
        t0 = time.perf_counter()
        await asyncio.sleep(duration)
        elapsed = time.perf_counter() - t0
        if steady is not None and profile_to:
            steady.disable()
            steady.dump_stats(profile_to + ".steady")
        result["cpu_percent"] = 100 * (cpu_s() - cpu0) / elapsed
        result["hosts_cpu_percent"] = 100 * (tree_cpu_s(server_pids) - host0) / elapsed
        result["updates_per_s"] = (probe.updates - updates0) / elapsed
        result["batches"] = len(probe.apply_ms)
        result["apply_ms"] = probe.apply_ms
        result["paint_ms"] = probe.paint_ms

        # Keys while the samples keep coming.
        attention: list[float] = []
        for on in (True, False) * 5:
            attention.append(
                await _key_latency(
                    app,
                    probe,
                    "a",
                    "a",
                    lambda on=on: screen.attention_only is on,  # type: ignore[misc]
                )
            )
        typing: list[float] = []
        for _ in range(2):
            await _key_latency(app, probe, "slash", "/", lambda: app.focused is not None)
            typed = ""
            for char in "node1":
                typed += char
                typing.append(
                    await _key_latency(
                        app,
                        probe,
                        char,
                        char,
                        lambda t=typed: screen.query_text == t,  # type: ignore[misc]
                    )
                )
            await _key_latency(app, probe, "escape", None, lambda: screen.query_text == "")
        result["attention_ms"] = attention
        result["typing_ms"] = typing
        result["peak_rss_mib"] = peak_rss_mib()
        await pilot.pause()
    if scraping is not None:
        scraping.set()
    return result


def _metrics_on(app: Any) -> threading.Event | None:
    """``BENCH_METRICS=S``: the console's Prometheus endpoint on (``--metrics-listen``) and
    scraped every S seconds from a thread of this process (its client's CPU counted as the
    console's: an upper bound of what the endpoint costs)."""
    every = float(os.environ.get("BENCH_METRICS", "0") or 0)
    if every <= 0:
        return None
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    app.services.metrics_listen = ("127.0.0.1", port)
    stop = threading.Event()

    def scrape() -> None:
        while not stop.wait(every):
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()

    threading.Thread(target=scrape, name="bench-scraper", daemon=True).start()
    return stop


def worker(args: argparse.Namespace) -> int:
    inventory = gpu_inventory(Path(args.inventory), args.count)
    result = asyncio.run(
        run_worker(
            inventory, args.size, args.duration, [int(p) for p in args.server_pids.split(",")]
        )
    )
    print(json.dumps(result))
    return 0


def measure(
    inventory: Path, count: int, size: tuple[int, int], duration: float, server_pids: Sequence[int]
) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", "--inventory", str(inventory)]
    cmd += ["--count", str(count), "--duration", f"{duration:g}", "--size", "{}x{}".format(*size)]
    cmd += ["--server-pids", ",".join(map(str, server_pids))]
    return run_json(cmd, "worker", timeout=duration + 240)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=demo_host_counts, default=[8, 32, 64])
    parser.add_argument("--duration", type=positive_float, default=20.0, help="steady seconds")
    parser.add_argument("--size", type=_size, default=(200, 60), help="terminal, WxH")
    parser.add_argument("--repeat", type=int, default=1, help="runs per N (median shown)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--inventory", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--server-pids", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.repeat < 1:
        parser.error("--repeat: must be at least 1")

    with demo_cluster(max(args.hosts), "bench/cluster_ui.py") as (servers, inventory):
        load1, load5, _ = os.getloadavg()
        print(
            f"cluster screen bench: {max(args.hosts)} demo hosts served by {servers.describe()}, "
            f"{GPUS_PER_HOST} simulated GPUs each, 1 Hz, terminal {args.size[0]}x{args.size[1]}, "
            f"{args.duration:g} s steady, {args.repeat} run(s) per N (median); "
            f"load average {load1:.2f} / {load5:.2f}; CPU % is of one core",
            flush=True,
        )
        results = {
            count: [
                measure(inventory, count, args.size, args.duration, servers.pids)
                for _ in range(args.repeat)
            ]
            for count in args.hosts
        }
        print_tables(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
