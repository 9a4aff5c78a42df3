"""Pieces bench/logs.py shares between its modes: the writers it starts on the host,
the exactly-once check, the timeline of a run (CPU and memory readings: common.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from common import cpu_s, peak_rss_mib

from console.logs.models import LogLine, as_runs
from console.transport import HostConnection

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
            try:
                first_n, last_n = int(head.split(" ", 4)[3]), int(last.split(" ", 4)[3])
            except (IndexError, ValueError):
                if len(self.errors) < 5:
                    self.errors.append(f"rank {key}: not a writer's line in {run.text[-300:]!r}")
                self.lines += run.nlines
                continue
            want = self.next.get(key, 0)
            wrong = first_n != want or last_n != first_n + run.nlines - 1
            if wrong and len(self.errors) < 5:
                self.errors.append(f"rank {key}: got {first_n}..{last_n}, expected {want}")
            self.next[key] = last_n + 1
            self.lines += run.nlines

    def ok(self, counts: list[int]) -> bool:
        return not self.errors and all(self.next.get(r, 0) == n for r, n in enumerate(counts))


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
            "peak_mb": peak_rss_mib(), "baseline_mb": baseline_mb,
        }  # fmt: skip
