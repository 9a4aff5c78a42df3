"""`distconsole validate HOSTS`: measure every host, GPU and link before a long run and
judge each against the fleet's median and the GPU's datasheet peak (docs/validate.md).

``--json``: ``{"rows": [{"host", "gpu" (int | null: the host's own row), "state",
"reasons", "figures"}], "links": [{"hosts", "busbw_gbps", "state", "reasons"}], "ring":
{"busbw_gbps", "hosts", "size_mb"} | null, "errors": [...]}``. Progress goes to stderr.
Exit status 0 when nothing fails, 1 when something does, 2 for bad input, 130 on Ctrl-C
(every process started on the hosts is killed first).
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

from console.commands.parts import options
from console.display import plain
from console.errors import EXIT_FAILED, EXIT_OK, UsageError
from console.inventory import Host, load
from console.transport.pool import ClusterConnections
from console.validate import store
from console.validate.runner import Outcome, Plan, validate_hosts
from console.validate.verdicts import LinkRow, Row, Thresholds, judge_hosts, judge_links

HELP = "measure every host, GPU and link (compute, memory, all-reduce) and judge them"
MIN_WINDOW_S = 0.3
COLOURS = {"ok": "32", "warn": "33", "fail": "31"}


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (a share), got {text}")
    return value


def positive(text: str) -> int:
    value = options.whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def window_seconds(text: str) -> float:
    value = options.seconds(text)
    if value < MIN_WINDOW_S:
        raise argparse.ArgumentTypeError(
            f"at least {MIN_WINDOW_S:g} s: a CPU quota's 100 ms periods average out only over "
            f"windows much longer than a period, got {text}"
        )
    return value


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "validate",
        help=HELP,
        description="Run torch on every host: CPU fp32 matmul and memory copy per host; "
        "bf16 matmul, device copy and pinned host<->device copies per GPU; NCCL all-reduce "
        "across a host's GPUs; then a gloo all-reduce over all hosts and between ring "
        "neighbours to find a slow host or link. A figure 25 percent below the fleet median "
        "warns, 50 percent fails; GPUs are also judged against their datasheet peak. Results are "
        "kept for `distconsole health`. Exit status 0: nothing fails; 1: something fails; "
        "2: bad input; 130: interrupted.",
    )
    options.add_inventory(parser)
    options.add_json(parser, 'print {"rows", "links", "ring", "errors"} as JSON')
    parser.add_argument(
        "--quick", action="store_true", help="smaller sizes and shorter windows (~1 s per test)"
    )
    parser.add_argument(
        "--parallel",
        type=positive,
        default=4,
        metavar="N",
        help="hosts measured at once in the compute phase (default 4)",
    )
    parser.add_argument(
        "--threads",
        type=positive,
        default=1,
        metavar="N",
        help="CPU threads of the CPU test (torch.set_num_threads; default 1)",
    )
    parser.add_argument(
        "--warn-below",
        type=fraction,
        default=0.25,
        metavar="F",
        help="warn when a figure is this share or more below the fleet median (default 0.25)",
    )
    parser.add_argument(
        "--fail-below",
        type=fraction,
        default=0.5,
        metavar="F",
        help="fail when a figure is this share or more below the fleet median (default 0.5)",
    )
    parser.add_argument(
        "--window",
        type=window_seconds,
        default=None,
        metavar="S",
        help="seconds per measurement window, each figure the median of several "
        "(default 0.5; --quick 0.3)",
    )
    parser.add_argument(
        "--allreduce-mb",
        type=positive,
        default=None,
        metavar="N",
        help="message size of the all-reduce tests between hosts (default 16; --quick 4)",
    )
    parser.add_argument("--no-links", action="store_true", help="skip the all-reduce between hosts")
    parser.add_argument(
        "--timeout",
        type=options.seconds,
        default=600.0,
        metavar="S",
        help="give up on one host's test after S seconds (default 600)",
    )
    options.add_host_selection(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.fail_below <= args.warn_below:
        raise UsageError("--fail-below", "must be larger than --warn-below")
    inventory = load(args.inventory)
    hosts = options.selected_hosts(inventory, args.names, args.tags)
    thresholds = Thresholds(warn=args.warn_below, fail=args.fail_below)
    plan = Plan(
        quick=args.quick,
        parallel=args.parallel,
        threads=args.threads,
        links=not args.no_links,
        thresholds=thresholds,
        timeout_s=args.timeout,
        window_s=args.window,
        allreduce_mb=args.allreduce_mb,
    )
    started = time.monotonic()
    outcome, down = asyncio.run(_measure(hosts, plan))
    links, host_links = judge_links(outcome.pairs, thresholds)
    rows = down + judge_hosts(outcome.hosts, thresholds, host_links)
    store.save(args.inventory, rows)
    duration = time.monotonic() - started
    _progress(f"done in {duration:.0f} s")
    if args.json:
        document = {
            "rows": [r.to_json() for r in rows],
            "links": [link.to_json() for link in links],
            "ring": outcome.ring,
            "errors": outcome.link_errors,
            "duration_s": round(duration, 1),
        }
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        sys.stdout.write(render(rows, links, outcome, colour=colour))
    failed = any(r.state == "fail" for r in rows) or any(link.state == "fail" for link in links)
    return EXIT_FAILED if failed or outcome.link_errors else EXIT_OK


def _progress(line: str) -> None:
    print(f"validate: {line}", file=sys.stderr, flush=True)


async def _measure(hosts: Sequence[Host], plan: Plan) -> tuple[Outcome, list[Row]]:
    pool = ClusterConnections(hosts)
    try:
        _progress(f"connecting to {len(hosts)} host(s)")
        statuses = await pool.wait_settled()
        up = [h for h in hosts if statuses[h.name].is_up]
        down = [
            Row(
                h.name,
                None,
                "fail",
                (f"host is {statuses[h.name].state.value}: {statuses[h.name].reason}",),
            )
            for h in hosts
            if not statuses[h.name].is_up
        ]
        outcome = await validate_hosts(pool, up, plan, _progress) if up else Outcome()
        return outcome, down
    finally:
        await pool.close()


def _figures(row: Row) -> str:
    keys = (
        ("matmul_tflops", "dev_mem_gbps", "h2d_gbps", "d2h_gbps")
        if row.gpu is not None
        else ("cpu_gflops", "mem_gbps", "nccl_busbw_gbps")
    )
    return " ".join(f"{k}={row.figures[k]}" for k in keys if k in row.figures)


def render(
    rows: Sequence[Row], links: Sequence[LinkRow], outcome: Outcome, *, colour: bool = False
) -> str:
    order = {"fail": 0, "warn": 1, "ok": 2}
    width = max([4, *(len(r.host) for r in rows)])

    def state(s: str) -> str:
        text = f"{s:<5}"
        return f"\x1b[{COLOURS[s]}m{text}\x1b[0m" if colour else text

    lines = [f"{'HOST':<{width}}  GPU  STATE  FIGURES / REASONS"]
    for r in sorted(rows, key=lambda r: order[r.state]):
        gpu = "-" if r.gpu is None else str(r.gpu)
        said = plain("; ".join(r.reasons)) or _figures(r)
        lines.append(f"{r.host:<{width}}  {gpu:>3}  {state(r.state)}  {said}")
    if outcome.ring:
        lines.append(
            f"all-reduce over {len(outcome.ring['hosts'])} hosts: "
            f"{outcome.ring['busbw_gbps']:.3g} GB/s bus bandwidth (gloo)"
        )
    for link in sorted(links, key=lambda link: order[link.state]):
        said = plain("; ".join(link.reasons)) or f"{link.busbw_gbps:.3g} GB/s"
        lines.append(f"link {link.hosts[0]}<->{link.hosts[1]}  {state(link.state)}  {said}")
    lines += [f"error: {plain(e)}" for e in outcome.link_errors]
    counts = {s: sum(r.state == s for r in rows) for s in ("fail", "warn", "ok")}
    lines.append(f"{counts['fail']} fail, {counts['warn']} warn, {counts['ok']} ok")
    return "\n".join(lines) + "\n"
