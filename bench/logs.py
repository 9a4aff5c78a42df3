"""Log ingestion: 64 ranks writing as fast as they can, followed by the console.

Self-contained: it starts its own host (a real OpenSSH sshd on loopback from
``tests/sshd_cluster.py``, with its own non-root user; needs root, like the tests) and,
on that host through ssh, one writer process per rank (``--ranks``, default 64), each
appending numbered trainer-like lines (``rank R step N loss ... samples/s ...``) to its
own file for ``--duration`` seconds, at ``--rate`` lines/s in all (0: as fast as they
can). Every mode runs in a fresh child process (its own CPU time and peak RSS):

- follower: ``HostLogFollower`` (one remote follower for all files, binary frames
  over the ssh channel) feeding ``LogStore`` + ``StepTracker`` like the UI does;
- naive: what tail-polling tools do: every ``--poll`` s, one ``tail -c +OFFSET FILE``
  per file over the same connection (sshd's MaxSessions respected), same consumer work;
- ui: the real ``DistConsoleApp`` run headless (``run_test``) with the logs screen
  following the job's files; while it ingests, keys are sent (``f`` pause/follow,
  ``/`` + Enter search, ``pageup``, ``m`` filter, ``r``/Escape rank chooser) and each
  is timed from the key event to the first frame the screen paints after the change
  shows (frames are counted at the app's display hook, which runs headless too).

Printed per run: lines written, lines ingested while writing (lines/s), behind at the
stop, catch-up rate, whether every line arrived exactly once and in order (per rank:
each run's first and last numbers against the expected next one), console CPU %, peak
RSS and memory per kept line; then medians over ``--repeat`` runs, the key latencies,
the follower / naive ratio, and the load average (the machine may be shared).

    python bench/logs.py [--duration 10] [--ranks 64] [--rate 400000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from console.inventory import Host, Inventory, load  # noqa: E402
from console.logs.buffer import LogStore  # noqa: E402
from console.logs.follower import FollowTarget, HostLogFollower, follow_hosts  # noqa: E402
from console.logs.models import LogLine, as_runs  # noqa: E402
from console.logs.prefixes import attribute, guess_context  # noqa: E402
from console.logs.steps import StepTracker  # noqa: E402
from console.transport import ClusterConnections, HostConnection  # noqa: E402
from console.transport.local import LocalConnection  # noqa: E402

WRITER = r"""
import os, sys, time
out, rank, start_at, duration, rate = sys.argv[1], int(sys.argv[2]), *map(float, sys.argv[3:6])
f = open(os.path.join(out, "rank-%d.out" % rank), "ab", buffering=1 << 16)
LINE = b"rank %d step %d loss 0.1234 samples/s 1234.5 lr 0.001 grad_norm 1.0\n"
time.sleep(max(0.0, start_at - time.time()))
start = time.monotonic()
deadline, n = start + duration, 0
while time.monotonic() < deadline:
    for _ in range(50):
        f.write(LINE % (rank, n))
        n += 1
    if rate:
        f.flush()
        ahead = n / rate - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)
f.close()
print(n)
"""
LAUNCHER = r"""
import json, subprocess, sys
writer, out, ranks, start_at, duration, rate = sys.argv[1:7]
procs = [subprocess.Popen([sys.executable, "-c", writer, out, str(r), start_at, duration, rate],
                          stdout=subprocess.PIPE, text=True) for r in range(int(ranks))]
print(json.dumps([int(p.communicate()[0]) for p in procs]))
"""
KEYS = ("f", "slash", "enter", "pageup", "pagedown", "m", "r", "escape")


class OnceChecker:
    """Every line of every rank exactly once, in order: per run, the first and last step
    numbers must continue the rank's sequence (a run is consecutive lines of a file)."""

    def __init__(self) -> None:
        self.next: dict[Any, int] = {}
        self.lines = 0
        self.errors: list[str] = []

    def feed(self, lines: Sequence[LogLine]) -> None:
        for run in as_runs(lines):
            key = run.source.key
            head, _, rest = run.text.partition("\n")
            last = rest[rest.rfind("\n") + 1 :] if rest else head
            first_n, last_n = int(head.split(" ", 4)[3]), int(last.split(" ", 4)[3])
            want = self.next.get(key, 0)
            wrong = first_n != want or last_n != first_n + run.nlines - 1
            if wrong and len(self.errors) < 5:
                self.errors.append(f"rank {key}: got {first_n}..{last_n}, expected {want}")
            self.next[key] = last_n + 1
            self.lines += run.nlines

    def ok(self, counts: list[int]) -> bool:
        return not self.errors and all(self.next.get(r, 0) == n for r, n in enumerate(counts))


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def start_writers(
    conn: HostConnection, out: str, args: argparse.Namespace, start_at: float
) -> asyncio.Task[list[int]]:
    await conn.run(["mkdir", "-p", out], timeout=30)

    async def run() -> list[int]:
        argv = ["python3", "-c", LAUNCHER, WRITER, out, str(args.ranks), str(start_at),
                str(args.duration), str(args.rate / args.ranks)]  # fmt: skip
        result = await conn.run(argv, timeout=args.duration + 300)
        if not result.ok:
            raise SystemExit(f"writers failed: {result.stderr[-2000:]}")
        counts: list[int] = json.loads(result.stdout)
        return counts

    return asyncio.create_task(run())


class Timeline:
    """Ingest and CPU at the start and end of the writing window, then the drain."""

    def __init__(self, args: argparse.Namespace, ingested: Callable[[], int]) -> None:
        self.args = args
        self.ingested = ingested
        self.start_at = time.time() + 3.0  # writers (64 processes) start meanwhile
        self.marks: dict[str, tuple[float, float, int]] = {}

    def mark(self, name: str) -> None:
        self.marks[name] = (time.monotonic(), cpu_s(), self.ingested())

    async def window(self) -> None:
        await asyncio.sleep(max(0.0, self.start_at - time.time()))
        self.mark("start")
        await asyncio.sleep(self.args.duration)
        self.mark("stop")

    async def drain(self, written: int) -> None:
        deadline = time.monotonic() + self.args.drain
        while self.ingested() < written and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        self.mark("drained")

    def result(self, counts: list[int], checker: OnceChecker, baseline_mb: float) -> dict[str, Any]:
        (t0, c0, n0), (t1, c1, n1), (t2, _c2, n2) = (
            self.marks[k] for k in ("start", "stop", "drained")
        )
        written = sum(counts)
        return {
            "written": written, "while_writing": n1 - n0, "rate": (n1 - n0) / (t1 - t0),
            "behind": written - n1, "catch_up": (n2 - n1) / max(t2 - t1, 1e-3),
            "drain_s": t2 - t1, "total": n2, "once": checker.ok(counts) and n2 == written,
            "errors": checker.errors, "cpu_pct": 100 * (c1 - c0) / (t1 - t0),
            "peak_mb": peak_rss_mb(), "baseline_mb": baseline_mb,
        }  # fmt: skip


async def run_follower(conn: HostConnection, out: str, args: argparse.Namespace) -> dict[str, Any]:
    store, tracker, checker = LogStore(args.max_lines), StepTracker(), OnceChecker()
    follower = HostLogFollower(conn, FollowTarget("bench", conn.host.name, dirs=(out,)))
    timeline = Timeline(args, lambda: store.total_received)

    async def consume() -> None:
        async for batch in follow_hosts([follower]):
            store.add(batch.lines)
            tracker.feed(batch.lines)
            checker.feed(batch.lines)

    baseline = rss_mb()
    writers = await start_writers(conn, out, args, timeline.start_at)
    consumer = asyncio.create_task(consume())
    await timeline.window()
    counts = await writers
    await timeline.drain(sum(counts))
    consumer.cancel()
    await asyncio.gather(consumer, return_exceptions=True)
    result = timeline.result(counts, checker, baseline)
    result["kept"] = len(store)
    result["ranks_with_steps"] = sum(1 for r in tracker.ranks() if r.step is not None)
    return result


async def run_naive(conn: HostConnection, out: str, args: argparse.Namespace) -> dict[str, Any]:
    store, tracker, checker = LogStore(args.max_lines), StepTracker(), OnceChecker()
    paths = [f"{out}/rank-{r}.out" for r in range(args.ranks)]
    offsets = dict.fromkeys(paths, 0)
    pending = dict.fromkeys(paths, b"")
    contexts = {p: guess_context("bench", conn.host.name, p) for p in paths}
    sessions = asyncio.Semaphore(8)  # sshd's MaxSessions (default 10) per connection
    timeline = Timeline(args, lambda: store.total_received)

    async def poll_one(path: str) -> None:
        async with sessions:
            result = await conn.run(["tail", "-c", f"+{offsets[path] + 1}", path], timeout=60)
        raw = result.stdout.encode()
        data = pending[path] + raw
        offsets[path] += len(raw)
        cut = data.rfind(b"\n") + 1
        pending[path] = data[cut:]
        lines = attribute(contexts[path], data[:cut].decode().split("\n")[:-1], time.time())
        store.add(lines)
        tracker.feed(lines)
        checker.feed(lines)

    async def poll() -> None:
        while True:
            tick = time.monotonic()
            await asyncio.gather(*(poll_one(p) for p in paths))
            await asyncio.sleep(max(0.0, args.poll - (time.monotonic() - tick)))

    baseline = rss_mb()
    writers = await start_writers(conn, out, args, timeline.start_at)
    poller = asyncio.create_task(poll())
    await timeline.window()
    counts = await writers
    await timeline.drain(sum(counts))
    poller.cancel()
    await asyncio.gather(poller, return_exceptions=True)
    result = timeline.result(counts, checker, baseline)
    result["kept"] = len(store)
    return result


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
    async with app.run_test(size=(200, 50)) as pilot:
        deadline = time.monotonic() + 30
        while True:
            pool = app.connections
            if isinstance(pool, ClusterConnections) and pool[host].status.state is HostState.UP:
                break
            if time.monotonic() > deadline:
                raise SystemExit("the sshd host did not come up")
            await pilot.pause(0.1)
        conn = pool[host]
        screen = CheckedLogsScreen(plan, clock=time.time, max_lines_per_rank=args.max_lines)
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


def run_decode(args: argparse.Namespace) -> dict[str, Any]:
    """The console side alone, in process: frames as the real follower program writes
    them (its Follower class writing to memory) -> read_frames -> decode -> LogStore +
    StepTracker, read in 256 KiB pieces like the transport hands them over."""
    import io

    from console.logs import follow_program

    out = io.BytesIO()
    program = follow_program.Follower({"files": []}, out)
    files = [follow_program.TrackedFile(f"/bench/rank-{r}.out", 0, 1) for r in range(args.ranks)]
    line = b"rank %d step %d loss 0.1234 samples/s 1234.5 lr 0.001 grad_norm 1.0\n"
    per_chunk, total = 150, 0  # ~10 KB per file per follower cycle, as at 400k lines/s
    for step in range(0, 1_000_000 // (args.ranks * per_chunk) * per_chunk, per_chunk):
        for rank, tracked in enumerate(files):
            program._consume(tracked, b"".join(line % (rank, step + i) for i in range(per_chunk)))
            total += per_chunk
    raw = out.getvalue()
    reads = [raw[i : i + (1 << 18)] for i in range(0, len(raw), 1 << 18)]

    # decode() needs no connection; the follower is never started here.
    unused = LocalConnection(Host(name="h", address="local"))
    follower = HostLogFollower(unused, FollowTarget("bench", "h", dirs=("/bench",)))
    store, tracker, checker = LogStore(args.max_lines), StepTracker(), OnceChecker()
    baseline = rss_mb()
    cpu0, t0 = cpu_s(), time.perf_counter()
    buf, paths = bytearray(), dict[int, str]()
    for piece in reads:
        buf += piece
        frames, used = follow_program.read_frames(buf, paths)
        del buf[:used]
        lines, advanced = follower.decode(frames)
        follower.cursors.update(advanced)
        store.add(lines)
        tracker.feed(lines)
        checker.feed(lines)
    elapsed = time.perf_counter() - t0
    cpu = cpu_s() - cpu0
    return {
        "written": total, "while_writing": total, "rate": total / elapsed, "behind": 0,
        "catch_up": total / elapsed, "drain_s": 0.0, "total": store.total_received,
        "once": checker.ok([total // args.ranks] * args.ranks), "errors": checker.errors,
        "cpu_pct": 100 * cpu / elapsed, "peak_mb": peak_rss_mb(), "baseline_mb": baseline,
        "kept": len(store), "bytes": len(raw),
    }  # fmt: skip


async def child(args: argparse.Namespace) -> dict[str, Any]:
    if args.child == "decode":
        return run_decode(args)
    inventory = load(args.inventory)
    out = args.dir
    if args.child == "ui":
        return await run_ui(inventory, out, args)
    pool = ClusterConnections(list(inventory.hosts))
    await pool.start()
    await pool.wait_settled()
    try:
        conn = pool[inventory.hosts[0].name]
        run = run_follower if args.child == "follower" else run_naive
        return await run(conn, out, args)
    finally:
        await pool.close()


def run_child(
    mode: str, inventory: Path, home: Path, index: int, argv: list[str]
) -> dict[str, Any]:
    out = f"{home}/bench-logs-{mode}-{index}"
    load_before = os.getloadavg()[0]
    proc = subprocess.run(
        [sys.executable, __file__, *argv, "--child", mode, "--inventory", str(inventory),
         "--dir", out], capture_output=True, text=True,
    )  # fmt: skip
    subprocess.run(["rm", "-rf", out], check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["load"] = (load_before, os.getloadavg()[0])
    return result


def show(mode: str, r: dict[str, Any]) -> None:
    per_line = (r["peak_mb"] - r["baseline_mb"]) * 2**20 / max(r["kept"], 1)
    print(
        f"{mode:9s} written {r['written']:>10,d}  while writing {r['rate']:>9,.0f} lines/s"
        f"  behind at stop {r['behind']:>9,d}  catch-up {r['catch_up']:>9,.0f} lines/s"
        f" ({r['drain_s']:4.1f} s)  exactly once: {r['once']}  console CPU {r['cpu_pct']:3.0f}%"
        f"  peak RSS {r['peak_mb']:6.0f} MiB ({per_line:4.0f} B/kept line, {r['kept']:,d} kept)"
        f"  load {r['load'][0]:.1f}->{r['load'][1]:.1f}"
    )
    for error in r.get("errors", []):
        print(f"          {error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of writing")
    parser.add_argument("--ranks", type=int, default=64, help="writer processes (one file each)")
    parser.add_argument("--rate", type=float, default=400_000,
                        help="lines/s of all writers together (0: as fast as they can)")
    parser.add_argument("--poll", type=float, default=0.1, help="naive poll interval, seconds")
    parser.add_argument("--drain", type=float, default=120.0, help="max seconds to catch up")
    parser.add_argument("--max-lines", type=int, default=100_000, help="kept lines per rank")
    parser.add_argument("--modes", default="decode,follower,naive,ui",
                        help="decode (console side alone, no host), follower, naive, ui")
    parser.add_argument("--repeat", type=int, default=1, help="runs per mode (medians shown)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--inventory", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rate < 0:
        parser.error("--rate must be >= 0")
    for name in ("duration", "poll", "drain"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be > 0")
    for name in ("ranks", "max_lines", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    modes = args.modes.split(",")
    for mode in modes:
        if mode not in ("decode", "follower", "naive", "ui"):
            parser.error(f"--modes: unknown mode {mode!r} (decode, follower, naive, ui)")
    if args.child:
        print(json.dumps(asyncio.run(child(args))))
        return
    if modes == ["decode"]:  # needs no host
        print(f"{args.ranks} ranks, console side alone (no host)")
        result = run_decode(args)
        result["load"] = os.getloadavg()[:1] * 2
        show("decode", result)
        return
    bench(args, modes)


def bench(args: argparse.Namespace, modes: list[str]) -> None:
    from sshd_cluster import SshdCluster, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        raise SystemExit(f"cannot start the benchmark's sshd host: {reason}")
    forwarded = [f"--duration={args.duration}", f"--ranks={args.ranks}", f"--rate={args.rate}",
                 f"--poll={args.poll}", f"--drain={args.drain}", f"--max-lines={args.max_lines}"]
    print(f"{args.ranks} ranks x {args.duration:g} s at {args.rate:,.0f} lines/s in all "
          f"(0 = as fast as they can), 1 sshd host on loopback, {os.cpu_count()} CPUs")  # fmt: skip
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="bench-logs-") as root:
        cluster = SshdCluster(Path(root) / "cluster", 1)
        try:
            home = cluster.hosts[0].home
            for i in range(args.repeat):
                for mode in modes:
                    result = run_child(mode, cluster.inventory_path, home, i, forwarded)
                    results[mode].append(result)
                    show(mode, result)
        finally:
            cluster.close()
    summary(results)


def summary(results: dict[str, list[dict[str, Any]]]) -> None:
    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in results[mode])

    print("\nmedians        lines/s while writing   catch-up lines/s   console CPU   all once")
    for mode, runs in results.items():
        if runs:
            print(f"  {mode:9s} {med(mode, 'rate'):>18,.0f} {med(mode, 'catch_up'):>18,.0f}"
                  f" {med(mode, 'cpu_pct'):>12.0f}%   {all(r['once'] for r in runs)}")  # fmt: skip
    if results.get("ui"):
        print("\nkeypress -> screen while ingesting (ui mode), ms:")
        for name in KEYS:
            values = [v for r in results["ui"] for v in r["latency_ms"][name]]
            if values:
                print(f"  {name:8s} median {statistics.median(values):6.1f}  max {max(values):6.1f}"
                      f"  ({len(values)} presses)")  # fmt: skip
    if results.get("follower") and results.get("naive") and med("naive", "rate") > 0:
        ratio = med("follower", "rate") / med("naive", "rate")
        cpu = (med("naive", "cpu_pct") / med("naive", "rate")) / (
            med("follower", "cpu_pct") / med("follower", "rate")
        )
        behind = med("naive", "behind") / max(med("follower", "behind"), 1)
        print(f"\nfollower vs naive tail-per-poll: ingest rate while writing {ratio:.1f}x,"
              f" console CPU per line {cpu:.1f}x less, behind at the stop {behind:.0f}x less")


if __name__ == "__main__":
    main()
