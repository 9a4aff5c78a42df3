"""`distconsole health HOSTS`: every GPU's verdict (ok / warn / fail), with its reasons in
words and since when, from one sample of each host's sampler (the ``gpus`` snapshot).

``--json``: a list of rows ``{"host", "gpu" (int | null: about the host: down, no sample,
nvidia-smi / NVML not answering), "state" ("ok" | "warn" | "fail"), "reasons", "since"
(epoch seconds | null)}``, one per GPU. Exit status 0 when nothing fails, 1 when
something does, 2 for bad input (inventory, options).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from console.commands.gpus import snapshot
from console.commands.parts import options
from console.display import plain
from console.errors import EXIT_FAILED, EXIT_OK
from console.inventory import load
from console.probe.health import GpuVerdict, clock, cluster_verdicts
from console.validate.store import load_validated

HELP = "show every GPU's health verdict (ok / warn / fail) with its reasons and since when"
COLOURS = {"ok": "32", "warn": "33", "fail": "31"}


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "health",
        help=HELP,
        description="Take one sample on every host and judge every GPU: fail (uncorrectable "
        "ECC errors since the last reset, a row remap pending or failed, retired pages "
        "pending, a recovery action, a critical Xid, the host down or its nvidia-smi/NVML "
        "not answering), warn (clocks slowed, PCIe link degraded, corrected ECC errors, "
        "fan error, NVLink links down, hot) or ok. Exit status 0: nothing fails; 1: "
        "something fails; 2: bad input.",
    )
    options.add_inventory(parser)
    options.add_json(parser, 'print a JSON list of {"host", "gpu", "state", "reasons", "since"}')
    parser.add_argument(
        "--timeout",
        type=options.seconds,
        default=None,
        metavar="S",
        help="give up waiting for a host's sample after S seconds "
        "(default: the largest connect_timeout + a few seconds)",
    )
    options.add_host_selection(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    inventory = load(args.inventory)
    hosts = options.selected_hosts(inventory, args.names, args.tags)
    views = asyncio.run(snapshot(hosts, 1.0, args.timeout))
    rows = cluster_verdicts(views)
    # `distconsole validate`'s last verdict per host, where it ran (docs/validate.md).
    validated = load_validated(args.inventory)
    if args.json:
        listed = [r.to_json() for r in rows]
        for row in listed:
            if row["host"] in validated:
                row["validated"] = validated[row["host"]].to_json()
        json.dump(listed, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        sys.stdout.write(render(rows, colour=colour))
        for host in dict.fromkeys(h.name for h in hosts):
            if host in validated:
                sys.stdout.write(f"{host}: {validated[host].ago()}\n")
    return EXIT_FAILED if any(r.state == "fail" for r in rows) else EXIT_OK


def render(rows: Sequence[GpuVerdict], *, colour: bool = False, now: float | None = None) -> str:
    """One line per GPU (host-level rows show "-" for the GPU), failing ones first."""
    now = time.time() if now is None else now
    order = {"fail": 0, "warn": 1, "ok": 2}
    ordered = sorted(rows, key=lambda r: order[r.state])
    width = max([4, *(len(r.host) for r in rows)])
    lines = [f"{'HOST':<{width}}  GPU  STATE  SINCE     REASONS"]
    for r in ordered:
        state = f"{r.state:<5}"
        if colour:
            state = f"\x1b[{COLOURS[r.state]}m{state}\x1b[0m"
        gpu = "-" if r.gpu is None else str(r.gpu)
        since = clock(r.since) if r.since is not None else ""
        reasons = plain("; ".join(r.reasons))  # an Xid's text is the kernel log's bytes
        lines.append(f"{r.host:<{width}}  {gpu:>3}  {state}  {since:<8}  {reasons}")
    counts = {s: sum(r.state == s for r in rows) for s in ("fail", "warn", "ok")}
    lines.append(f"{counts['fail']} fail, {counts['warn']} warn, {counts['ok']} ok")
    return "\n".join(lines) + "\n"
