"""Log ingestion: 64 rank files written as fast as possible, followed by the console.

Writers: ``--writers`` local processes share ``--ranks`` files (round robin) and write
numbered trainer-like lines as fast as they can for ``--duration`` seconds. The console
side follows them the way the UI does, and feeds every batch into the bounded
``LogStore`` and the ``StepTracker``:

- follower: ONE long-lived follower process (``console.logs.follow_program``) for all
  files, over the local transport (``address: local``; the same program and framing the
  ssh transport carries; pass ``--inventory FILE --host NAME`` to go over ssh);
- naive: what ``tail``-polling tools do: every ``--poll`` seconds, one
  ``tail -c +OFFSET FILE`` command per file.

Printed per mode: lines written, lines ingested while writing (lines/s), how far behind
it was when the writers stopped, whether every line arrived exactly once after the
drain, console CPU, and peak RSS of the console process (the store is bounded by
``--max-lines`` lines per rank); then the follower / naive ratio.
The keypress-to-screen latency figure needs the UI logs screen (not part of this bench).

    python bench/logs.py [--duration 10] [--ranks 64] [--writers 4]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from console.inventory import Host, load
from console.logs.buffer import LogStore
from console.logs.follower import FollowTarget, HostLogFollower, follow_hosts
from console.logs.prefixes import attribute, guess_context
from console.logs.steps import StepTracker
from console.transport import ClusterConnections, HostConnection

WRITER = r"""
import os, sys, time
out_dir, first, step, ranks, duration = sys.argv[1], *map(int, sys.argv[2:5]), float(sys.argv[5])
rate = float(sys.argv[6])  # lines/s of this writer; 0: as fast as it can
mine = list(range(first, ranks, step))
files = {r: open(os.path.join(out_dir, "rank-%d.out" % r), "ab", buffering=1 << 16) for r in mine}
LINE = b"rank %d step %d loss 0.1234 samples/s 1234.5 lr 0.001 grad_norm 1.0\n"
start = time.monotonic()
deadline = start + duration
n = 0
while time.monotonic() < deadline:
    for _ in range(50):
        for r in mine:
            files[r].write(LINE % (r, n))
        n += 1
    if rate:
        for f in files.values():
            f.flush()
        ahead = n * len(mine) / rate - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)
for r in mine:
    files[r].close()
print(n * len(mine))
"""


def start_writers(
    out: Path, ranks: int, writers: int, duration: float, rate: float
) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(out), str(i), str(writers), str(ranks),
             str(duration), str(rate / writers)],
            stdout=subprocess.PIPE, text=True,
        )
        for i in range(writers)
    ]


def finish_writers(procs: list[subprocess.Popen[str]]) -> int:
    total = 0
    for proc in procs:
        stdout, _ = proc.communicate()
        total += int(stdout.strip())
    return total


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def run_follower(
    conn: HostConnection, out: Path, args: argparse.Namespace
) -> dict[str, Any]:
    store = LogStore(max_lines_per_rank=args.max_lines)
    tracker = StepTracker()
    target = FollowTarget("bench", conn.host.name, dirs=(str(out),))
    follower = HostLogFollower(conn, target, poll_s=args.poll)
    ingested = 0

    async def consume() -> None:
        nonlocal ingested
        async for batch in follow_hosts([follower]):
            store.add(batch.lines)
            tracker.feed(batch.lines)
            ingested += len(batch.lines)

    cpu0 = cpu_s()
    started = time.monotonic()
    consumer = asyncio.create_task(consume())
    writers = start_writers(out, args.ranks, args.writers, args.duration, args.rate)
    await asyncio.sleep(args.duration)
    ingested_at_end = ingested
    written = await asyncio.to_thread(finish_writers, writers)
    drain_deadline = time.monotonic() + args.drain
    while ingested < written and time.monotonic() < drain_deadline:
        await asyncio.sleep(0.05)
    elapsed = time.monotonic() - started
    consumer.cancel()
    await asyncio.gather(consumer, return_exceptions=True)
    steps = tracker.job()
    return {
        "written": written,
        "while_writing": ingested_at_end,
        "rate": ingested_at_end / args.duration,
        "behind": written - ingested_at_end,
        "total": ingested,
        "all_once": ingested == written and store.total_received == written,
        "cpu_pct": 100 * (cpu_s() - cpu0) / elapsed,
        "drain_s": elapsed - args.duration,
        "kept_lines": len(store),
        "ranks_with_steps": sum(1 for r in steps.ranks if r.step is not None),
    }


async def run_naive(conn: HostConnection, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    paths = [str(out / f"rank-{r}.out") for r in range(args.ranks)]
    offsets = dict.fromkeys(paths, 0)
    pending = dict.fromkeys(paths, b"")
    ingested = 0
    cpu0 = cpu_s()
    started = time.monotonic()
    writers = start_writers(out, args.ranks, args.writers, args.duration, args.rate)
    write_end = started + args.duration
    ingested_at_end: int | None = None
    written: int | None = None

    store = LogStore(max_lines_per_rank=args.max_lines)
    tracker = StepTracker()
    contexts = {p: guess_context("bench", conn.host.name, p) for p in paths}

    sessions = asyncio.Semaphore(8)  # sshd's MaxSessions (default 10) per connection

    async def poll_one(path: str) -> int:
        async with sessions:
            result = await conn.run(["tail", "-c", f"+{offsets[path] + 1}", path], timeout=30)
        raw = result.stdout.encode()
        data = pending[path] + raw
        offsets[path] += len(raw)
        cut = data.rfind(b"\n") + 1
        pending[path] = data[cut:]
        # the same work the follower's consumer does: attribute, store, steps
        texts = data[:cut].decode("utf-8", "replace").split("\n")[:-1]
        lines = attribute(contexts[path], texts, time.time())
        store.add(lines)
        tracker.feed(lines)
        return len(lines)

    while True:
        now = time.monotonic()
        if ingested_at_end is None and now >= write_end:
            ingested_at_end = ingested
            written = await asyncio.to_thread(finish_writers, writers)
        if written is not None and (ingested >= written or now > write_end + args.drain):
            break
        tick = time.monotonic()
        counts = await asyncio.gather(*(poll_one(p) for p in paths))
        ingested += sum(counts)
        await asyncio.sleep(max(0.0, args.poll - (time.monotonic() - tick)))
    elapsed = time.monotonic() - started
    assert written is not None and ingested_at_end is not None
    return {
        "written": written,
        "while_writing": ingested_at_end,
        "rate": ingested_at_end / args.duration,
        "behind": written - ingested_at_end,
        "total": ingested,
        "all_once": ingested == written,
        "cpu_pct": 100 * (cpu_s() - cpu0) / elapsed,
        "drain_s": elapsed - args.duration,
    }


def show(name: str, r: dict[str, Any]) -> None:
    catch_up = (r["total"] - r["while_writing"]) / max(r["drain_s"], 1e-3)
    print(
        f"{name:9s} written {r['written']:>10,d}  ingested while writing {r['while_writing']:>10,d}"
        f"  = {r['rate']:>10,.0f} lines/s  behind at stop {r['behind']:>10,d}"
        f"  drain {r['drain_s']:5.1f}s ({catch_up:,.0f} lines/s)  all once: {r['all_once']}"
        f"  console CPU {r['cpu_pct']:.0f}%"
    )


async def connection(args: argparse.Namespace) -> tuple[ClusterConnections, HostConnection]:
    if args.inventory:
        inv = load(args.inventory)
        host = inv.get(args.host) if args.host else inv.hosts[0]
    else:
        host = Host(name="local", address="local")
    pool = ClusterConnections([host])
    await pool.start()
    await pool.wait_settled()
    return pool, pool[host.name]


async def main_async(args: argparse.Namespace) -> None:
    pool, conn = await connection(args)
    results: dict[str, dict[str, Any]] = {}
    try:
        for mode in args.modes.split(","):
            out = Path(tempfile.mkdtemp(prefix=f"bench-logs-{mode}-", dir=args.dir))
            out.chmod(0o755)
            try:
                run = run_follower if mode == "follower" else run_naive
                results[mode] = await run(conn, out, args)
                show(mode, results[mode])
            finally:
                shutil.rmtree(out, ignore_errors=True)
    finally:
        await pool.close()
    if "follower" in results:
        f = results["follower"]
        print(
            f"follower: {f['kept_lines']:,d} lines kept in memory (bound {args.max_lines:,d}"
            f" per rank x {args.ranks}), steps read on {f['ranks_with_steps']} ranks;"
            f" console peak RSS {peak_rss_mb():.0f} MiB"
        )
    if "follower" in results and "naive" in results and results["naive"]["rate"] > 0:
        ratio = results["follower"]["rate"] / results["naive"]["rate"]
        print(f"ratio follower / naive tail-per-poll ingest rate: {ratio:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of writing")
    parser.add_argument("--ranks", type=int, default=64, help="rank files")
    parser.add_argument("--writers", type=int, default=4, help="writer processes")
    parser.add_argument(
        "--rate", type=float, default=400_000,
        help="lines/s all writers together aim at (0: as fast as they can; on a small "
        "machine that is millions of lines/s and gigabytes of files)",
    )
    parser.add_argument("--poll", type=float, default=0.1, help="poll interval, seconds")
    parser.add_argument("--drain", type=float, default=60.0, help="max seconds to catch up")
    parser.add_argument("--max-lines", type=int, default=100_000, help="kept lines per rank")
    parser.add_argument("--modes", default="follower,naive", help="follower,naive")
    parser.add_argument("--inventory", help="hosts.yaml: follow over ssh to --host")
    parser.add_argument("--host", help="host name in --inventory (default: the first)")
    parser.add_argument("--dir", default=None, help="where to write (default: /tmp)")
    args = parser.parse_args()
    if args.rate < 0:
        parser.error("--rate must be >= 0")
    for name in ("duration", "poll", "drain"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be > 0")
    for name in ("ranks", "writers", "max_lines"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
