"""GPU monitoring cost on the console: one streaming sampler per host vs polling.

N embedded demo hosts (served by a separate ``distconsole demo --serve`` process, so the
SSH servers and the samplers on the "hosts" are not charged to the console) with 8
simulated GPUs each, sampled at 1 Hz for ``--duration`` seconds, N = 8, 32, 64:

- stream: ``ClusterMonitor`` (one long-lived sampler per host writing a JSON line per
  interval over the host's existing connection);
- poll: what gpustat-web does: every interval, run a command on every host over its
  existing connection (``conn.run``), here the same sampler in one-shot mode, and parse
  its output.

Each mode runs in its own console process (``--worker``) so its CPU time and peak RSS
are its own. Printed per N and mode: time to the first complete frame (every host
sampled, connecting included; "connected" is when every connection was up), steady
console CPU % of one core (after the first frame), peak RSS, samples received and the
share of the expected samples (hosts x seconds / interval) that arrived ("kept up");
and the poll / stream ratios. On a small machine the demo hosts' samplers share the
console's cores, which a real cluster does not: first-frame times include starting N
Python samplers on those cores.

    python bench/monitor.py [--hosts 8,32,64] [--duration 30] [--interval 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import (
    GPUS_PER_HOST,
    cpu_s,
    demo_cluster,
    demo_host_counts,
    fmt,
    gpu_inventory,
    peak_rss_mib,
    positive_float,
    print_header,
    run_json,
)

from console.inventory import Host
from console.probe import sampler
from console.transport.base import HostState
from console.transport.pool import ClusterConnections


async def run_stream(hosts: Sequence[Host], interval: float, duration: float) -> dict[str, Any]:
    from console.probe.monitor import ClusterMonitor

    started = time.monotonic()
    samples = 0
    first: float | None = None
    steady_cpu = steady_t = 0.0
    connected: list[float] = []

    async def settled(pool: ClusterConnections) -> None:
        await pool.wait_settled()
        connected.append(time.monotonic() - started)

    async with (
        ClusterConnections(list(hosts)) as pool,
        ClusterMonitor(pool, interval=interval) as monitor,
    ):
        watch = asyncio.create_task(settled(pool))
        async for batch in monitor.updates():
            samples += sum(1 for v in batch.values() if v.sample is not None)
            now = time.monotonic()
            if first is None and all(v.sample for v in monitor.views().values()):
                first = now - started
                steady_cpu, steady_t, samples = cpu_s(), now, 0
            if first is not None and now - steady_t >= duration:
                break
            if first is None and now - started > 60:
                break
        await watch
    return _result(first, steady_cpu, steady_t, samples, connected[0], len(hosts), interval)


async def run_poll(hosts: Sequence[Host], interval: float, duration: float) -> dict[str, Any]:
    program = sampler.program_source()
    started = time.monotonic()
    async with ClusterConnections(list(hosts)) as pool:
        await pool.wait_settled()
        connected = time.monotonic() - started
        commands = {
            h.name: sampler.sampler_command(h, interval).replace(f" {interval:g} ", " 0 ", 1)
            for h in hosts
        }

        async def poll(name: str) -> bool:
            conn = pool[name]
            if conn.status.state is not HostState.UP:
                return False
            result = await conn.run(commands[name], input=program, timeout=30)
            line = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
            return bool(line) and sampler.decode_line(name, line) is not None

        first: float | None = None
        steady_cpu = steady_t = 0.0
        samples = 0
        tick = time.monotonic()
        while True:
            outcomes = await asyncio.gather(*(poll(h.name) for h in hosts), return_exceptions=True)
            ok = sum(1 for o in outcomes if o is True)
            now = time.monotonic()
            if first is None:
                if ok == len(hosts):
                    first = now - started
                    steady_cpu, steady_t = cpu_s(), now
            else:
                samples += ok
            if first is not None and now - steady_t >= duration:
                break
            if first is None and now - started > 60:
                break
            tick += interval
            await asyncio.sleep(max(0.0, tick - time.monotonic()))
    return _result(first, steady_cpu, steady_t, samples, connected, len(hosts), interval)


def _result(
    first: float | None,
    cpu0: float,
    t0: float,
    samples: int,
    connected: float,
    hosts: int,
    interval: float,
) -> dict[str, Any]:
    elapsed = time.monotonic() - t0
    return {
        "connected_s": connected,
        "first_frame_s": first,
        "kept_up_percent": 100.0 * samples / (hosts * elapsed / interval),
        "cpu_percent": 100.0 * (cpu_s() - cpu0) / elapsed if first is not None else None,
        "peak_rss_mib": peak_rss_mib(),
        "samples": samples,
        "steady_s": elapsed,
    }


def worker(args: argparse.Namespace) -> int:
    hosts = list(gpu_inventory(Path(args.inventory), args.count).hosts)
    runner = run_stream if args.worker == "stream" else run_poll
    result = asyncio.run(runner(hosts, args.interval, args.duration))
    print(json.dumps(result))
    return 0


def measure(
    mode: str, inventory: Path, count: int, interval: float, duration: float
) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", mode, "--inventory", str(inventory)]
    cmd += ["--count", str(count), "--interval", f"{interval:g}", "--duration", f"{duration:g}"]
    return run_json(cmd, f"{mode} worker", timeout=duration + 180)


def _per_sample(r: dict[str, Any]) -> float | None:
    """Console CPU milliseconds per host sample received."""
    if r["cpu_percent"] is None or not r["samples"]:
        return None
    return float(r["cpu_percent"]) * 10.0 * float(r["steady_s"]) / float(r["samples"])


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.1f}x"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=demo_host_counts, default=[8, 32, 64])
    parser.add_argument("--duration", type=positive_float, default=30.0, help="steady seconds")
    parser.add_argument("--interval", type=positive_float, default=1.0)
    parser.add_argument("--worker", choices=("stream", "poll"), help=argparse.SUPPRESS)
    parser.add_argument("--inventory", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)

    with demo_cluster(max(args.hosts), "bench/monitor.py") as (proc, inventory):
        print(
            f"monitor bench: {max(args.hosts)} demo hosts served by pid {proc.pid}, "
            f"{GPUS_PER_HOST} simulated GPUs each, every {args.interval:g} s, "
            f"{args.duration:g} s steady per run; console = the measuring process only"
        )
        header = (
            f"{'hosts':>5}  {'mode':<6}  {'connected':>9}  {'first frame':>11}  "
            f"{'console CPU':>11}  {'CPU/sample':>10}  {'peak RSS':>9}  {'samples':>7}  "
            f"{'kept up':>7}"
        )
        print_header(header)
        for count in args.hosts:
            res = {
                m: measure(m, inventory, count, args.interval, args.duration)
                for m in ("stream", "poll")
            }
            for mode in ("stream", "poll"):
                r = res[mode]
                print(
                    f"{count:>5}  {mode:<6}  {r['connected_s']:>7.2f} s  "
                    f"{fmt(r['first_frame_s'], '.2f'):>9} s  "
                    f"{fmt(r['cpu_percent'], '.1f'):>9} %  {fmt(_per_sample(r), '.2f'):>7} ms  "
                    f"{r['peak_rss_mib']:>5.0f} MiB  "
                    f"{r['samples']:>7}  {r['kept_up_percent']:>5.0f} %",
                    flush=True,
                )
            s, p = res["stream"], res["poll"]
            print(
                f"{count:>5}  {'ratio':<6}  poll/stream: first frame "
                f"{_ratio(p['first_frame_s'], s['first_frame_s'])}, CPU "
                f"{_ratio(p['cpu_percent'], s['cpu_percent'])}, CPU per sample "
                f"{_ratio(_per_sample(p), _per_sample(s))}, RSS "
                f"{_ratio(p['peak_rss_mib'], s['peak_rss_mib'])}",
                flush=True,
            )
        print("targets: 64 hosts first frame <= 1 s; console <= 5 % of one core (stream)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
