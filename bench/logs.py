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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from common import cpu_s, peak_rss_mib, rss_mb, run_json  # noqa: E402
from logs_parts import OnceChecker, Timeline, start_writers  # noqa: E402
from logs_ui import KEYS, run_ui  # noqa: E402

from console.inventory import Host, load  # noqa: E402
from console.logs.buffer import LogStore  # noqa: E402
from console.logs.follower import FollowTarget, HostLogFollower, follow_hosts  # noqa: E402
from console.logs.frames import Data, read_frames  # noqa: E402
from console.logs.prefixes import attribute, guess_context  # noqa: E402
from console.logs.steps import StepTracker  # noqa: E402
from console.transport import ClusterConnections, HostConnection  # noqa: E402
from console.transport.local import LocalConnection  # noqa: E402


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


def run_decode(args: argparse.Namespace) -> dict[str, Any]:
    """The console side alone, in process: frames as the real follower program writes
    them (its Follower class writing to memory) -> read_frames -> decode -> LogStore +
    StepTracker, read in 256 KiB pieces like the transport hands them over."""
    import io

    from console.hostprogs import follow_program

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
        frames, used = read_frames(buf, paths)
        del buf[:used]
        lines, advanced = follower.decode([f for f in frames if isinstance(f, Data)])
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
        "cpu_pct": 100 * cpu / elapsed, "peak_mb": peak_rss_mib(), "baseline_mb": baseline,
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
    try:
        result = run_json(
            [sys.executable, __file__, *argv, "--child", mode, "--inventory", str(inventory),
             "--dir", out], f"{mode} run",
        )  # fmt: skip
    finally:
        subprocess.run(["rm", "-rf", out], check=False)
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
    if "end_mb" in r:
        used, free = r.get("malloc_used_mb", 0), r.get("malloc_free_mb", 0)
        print(f"          at the end: RSS {r['end_mb']:.0f} MiB, malloc in use {used:.0f} MiB"
              f" and free {free:.0f} MiB, RSS after malloc_trim {r.get('trimmed_mb', 0):.0f}"
              f" MiB; store text {r['text_mb']:.0f} MiB; before the first line"
              f" {r['baseline_mb']:.0f} MiB")  # fmt: skip
    for error in r.get("errors", []):
        print(f"          {error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of writing")
    parser.add_argument("--ranks", type=int, default=64, help="writer processes (one file each)")
    parser.add_argument(
        "--rate",
        type=float,
        default=400_000,
        help="lines/s of all writers together (0: as fast as they can)",
    )
    parser.add_argument("--poll", type=float, default=0.1, help="naive poll interval, seconds")
    parser.add_argument("--drain", type=float, default=120.0, help="max seconds to catch up")
    parser.add_argument("--max-lines", type=int, default=100_000, help="kept lines per rank")
    parser.add_argument(
        "--modes",
        default="decode,follower,naive,ui",
        help="decode (console side alone, no host), follower, naive, ui",
    )
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
    forwarded = [
        f"--duration={args.duration}",
        f"--ranks={args.ranks}",
        f"--rate={args.rate}",
        f"--poll={args.poll}",
        f"--drain={args.drain}",
        f"--max-lines={args.max_lines}",
    ]
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
        every = sorted(v for r in results["ui"] for keys in r["latency_ms"].values() for v in keys)
        if every:
            p99 = every[min(len(every) - 1, round(0.99 * (len(every) - 1)))]
            print(f"  all keys median {statistics.median(every):6.1f}  p99 {p99:6.1f}"
                  f"  ({len(every)} presses; targets <= 100 / <= 200 ms)")  # fmt: skip
        kept = [r for r in results["ui"] if r["kept"]]
        if kept:
            r = kept[0]
            print()
            print(f"memory (ui mode): peak RSS {r['peak_mb']:.0f} MiB with {r['kept']:,d} lines"
                  f" kept (--max-lines x ranks; target <= 300 MB at 1 M)")  # fmt: skip
    if results.get("follower") and results.get("naive") and med("naive", "rate") > 0:
        ratio = med("follower", "rate") / med("naive", "rate")
        cpu = (med("naive", "cpu_pct") / med("naive", "rate")) / (
            med("follower", "cpu_pct") / med("follower", "rate")
        )
        behind = med("naive", "behind") / max(med("follower", "behind"), 1)
        print(
            f"\nfollower vs naive tail-per-poll: ingest rate while writing {ratio:.1f}x,"
            f" console CPU per line {cpu:.1f}x less, behind at the stop {behind:.0f}x less"
        )


if __name__ == "__main__":
    main()
