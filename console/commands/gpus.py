"""`distconsole gpus HOSTS`: every GPU of every host, from one sample of each host's
sampler (``--watch``: from streaming samplers).

One-shot table (default), ``--json`` snapshot, or ``--watch`` (a refreshing text view;
with ``--json`` one JSON list per line). Exit status as ``distconsole check``: 0 when
every host is up and sampled, 1 when any is not, 2 for bad input (inventory, options).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from console.commands.parts import options
from console.display import NOT_REPORTED, plain
from console.errors import EXIT_INTERRUPTED, EXIT_OK
from console.inventory import Host, load
from console.probe.models import GpuSample, HostView, host_view_to_json
from console.settings import DEFAULT_SETTINGS
from console.transport.base import HostState


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "gpus",
        help="show every GPU of every host (utilization, memory, power, processes, job/rank)",
        description="Take one sample on every host (--watch: keep one streaming sampler per "
        "host) and show every GPU: utilization, memory, temperature, power and its processes "
        "(with the distconsole job and rank they belong to). Exit status 0: all hosts up and "
        "sampled; 1: any not; 2: bad input.",
    )
    options.add_inventory(parser)
    options.add_json(parser, "print a JSON list, one per host")
    parser.add_argument(
        "--watch", action="store_true", help="keep refreshing until Ctrl-C (with --json: NDJSON)"
    )
    parser.add_argument(
        "--interval",
        type=options.seconds,
        default=1.0,
        metavar="S",
        help="sampling interval in seconds (default 1)",
    )
    parser.add_argument(
        "--timeout",
        type=options.seconds,
        default=None,
        metavar="S",
        help="one-shot: give up waiting for the first sample after S seconds "
        "(default: the largest connect_timeout + a few intervals)",
    )
    options.add_host_selection(parser)
    parser.set_defaults(func=run)


def ok(view: HostView) -> bool:
    return view.live and view.sample is not None


def _settle(views: dict[str, HostView], budget: float) -> list[HostView]:
    out = []
    for view in views.values():
        if view.state is HostState.CONNECTING:
            view = HostView(
                view.name, HostState.DOWN, f"no answer within {budget:g}s (still connecting)"
            )
        elif view.up and view.sample is None:
            reason = view.reason or f"no sample within {budget:g}s"
            view = HostView(view.name, view.state, reason)
        out.append(view)
    return out


async def snapshot(
    hosts: Sequence[Host],
    interval: float = 1.0,
    timeout: float | None = None,
    *,
    health: bool = True,
) -> list[HostView]:
    """Every host's first sample (or why there is none); ``health``: with the GPUs' health
    readings (``distconsole health`` reads them, ``gpus`` does not)."""
    from console.probe.monitor import ClusterMonitor
    from console.transport.pool import ClusterConnections

    pool = ClusterConnections(list(hosts), reconnect=False)
    # One sample per host: a sampler that writes one line (its CPU % window overlapping
    # its GPU query) and exits, instead of a stream whose second line is waited for.
    monitor = ClusterMonitor(pool, interval=interval, once=True, health=health)
    budget = timeout if timeout is not None else pool.settle_timeout() + 3 * interval + 5
    try:
        views = await monitor.first_frame(budget)
        return _settle(views, budget)
    finally:
        await monitor.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(pool.close(), DEFAULT_SETTINGS.close_timeout_s)


async def watch(hosts: Sequence[Host], interval: float, as_json: bool) -> None:
    from console.probe.monitor import ClusterMonitor
    from console.transport.pool import ClusterConnections

    colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    async with (
        ClusterConnections(list(hosts)) as pool,
        ClusterMonitor(pool, interval=interval, health=False) as monitor,
    ):
        last = 0.0
        async for _batch in monitor.updates():
            now = time.monotonic()
            if now - last < interval * 0.9:
                continue  # one refresh per interval, whatever the batches
            last = now
            views = list(monitor.views().values())
            if as_json:
                sys.stdout.write(json.dumps([host_view_to_json(v) for v in views]) + "\n")
            else:
                clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
                sys.stdout.write(clear + render(views, colour=colour))
            sys.stdout.flush()


def run(args: argparse.Namespace) -> int:
    # What the imports made lives until exit: out of the collector's passes (each full
    # pass walked it all, and the one at exit took ~100 ms of CPU, a run's sixth).
    gc.freeze()
    inventory = load(args.inventory)
    hosts = options.selected_hosts(inventory, args.names, args.tags)
    if args.watch:
        try:
            asyncio.run(watch(hosts, args.interval, args.json))
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED  # the only way a watch ends
        return EXIT_OK
    # No health readers: nothing here shows health, and each is a process on every host
    # (64 sshd hosts sharing 2 cores: 5.5 s with them, slower than pdsh's 5.0 s).
    views = asyncio.run(snapshot(hosts, args.interval, args.timeout, health=False))
    if args.json:
        json.dump([host_view_to_json(v) for v in views], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(views, colour=sys.stdout.isatty() and "NO_COLOR" not in os.environ))
    return 0 if all(ok(v) for v in views) else 1


# -- text view -----------------------------------------------------------------------------


def _n(value: float | None, fmt: str = "{:.0f}") -> str:
    return NOT_REPORTED if value is None else fmt.format(value)


def _pair(used: float | None, total: float | None, unit: str) -> str:
    return f"{_n(used)}/{_n(total)} {unit}"


def _gpu_line(g: GpuSample) -> str:
    return (
        f"  GPU {g.index:<2} {plain(g.name)[:34]:<34} util {_n(g.utilization_gpu):>3}%  "
        f"mem {_pair(g.memory_used_mib, g.memory_total_mib, 'MiB'):>18}  "
        f"{_n(g.temperature_c):>3} C  {_pair(g.power_draw_w, g.power_limit_w, 'W'):>11}  "
        f"{g.pstate or NOT_REPORTED}"
    )


def render(views: Sequence[HostView], *, colour: bool = False) -> str:
    lines: list[str] = []
    now = time.time()
    for view in views:
        s = view.sample
        state = view.state.value + (" (stale)" if view.stale else "")
        if colour:
            code = "32" if ok(view) else ("33" if view.up else "31")
            state = f"\x1b[{code}m{state}\x1b[0m"
        head = [view.name, state]
        if s is not None:
            mem = f"{_n(s.memory_used_mib and s.memory_used_mib / 1024, '{:.1f}')}"
            total = _n(s.memory_total_mib and s.memory_total_mib / 1024, "{:.1f}")
            head += [f"cpu {_n(s.cpu_percent)}%", f"mem {mem}/{total} GiB"]
            head += [f"load {_n(s.load_1m, '{:.2f}')}", f"[{s.gpu_source}]"]
            if s.simulated:
                head.append("SIMULATED GPUs")
        if view.stale and view.last_seen is not None:
            head.append(f"last seen {now - view.last_seen:.0f}s ago")
        if view.reason:
            head.append(plain(view.reason))
        lines.append("  ".join(head))
        if s is None:
            continue
        if s.gpu_error and not s.gpus:
            lines.append(f"  {plain(s.gpu_error)}")
        for g in s.gpus:
            lines.append(_gpu_line(g))
            for p in g.processes:
                job = f"  job {plain(p.job)} rank {_n(p.rank)}" if p.job else ""
                lines.append(
                    f"      pid {p.pid:<7} {plain(p.user):<10} "
                    f"{_n(p.used_memory_mib):>6} MiB{job}  {plain(p.command)[:80]}"
                )
    good = sum(ok(v) for v in views)
    lines.append(f"{good}/{len(views)} hosts up and sampled")
    return "\n".join(lines) + "\n"
