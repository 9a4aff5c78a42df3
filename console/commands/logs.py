"""`distconsole logs HOSTS JOB_ID`: every rank's output, rank-prefixed, optionally live.

Without ``--follow`` it prints what the log files hold now (from the start) and exits.
With ``--follow`` it starts at the current end of every file (``--since-start``: at the
beginning) and keeps printing until the job's processes have all exited or Ctrl-C;
a host that drops is followed again from the last line printed when it comes back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from console import inventory as inventory_mod
from console.commands import options
from console.display import log_line_text
from console.errors import JobError
from console.jobs.history import JobHistory
from console.logs.follower import FollowTarget, HostLogFollower, follow_hosts
from console.logs.models import LogBatch, LogLine
from console.logs.targets import targets_from_listing, targets_from_plan
from console.transport import ClusterConnections


def rank_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def regex_arg(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text, re.IGNORECASE)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"invalid regular expression {text!r}: {exc}") from None


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "logs",
        help="print every rank's log lines of a job (rank-prefixed; --follow for live)",
        description=__doc__,
    )
    options.add_inventory(parser)
    options.add_job_id(parser)
    parser.add_argument(
        "--rank",
        type=rank_arg,
        action="append",
        metavar="R",
        help="only this global rank (repeatable)",
    )
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing new lines")
    parser.add_argument(
        "--grep", type=regex_arg, metavar="RE", help="only lines matching RE (case-insensitive)"
    )
    parser.add_argument(
        "--since-start",
        action="store_true",
        help="with --follow: print each file from its beginning first",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per line: host, rank, stream, line (and job, local_rank, role)",
    )
    parser.set_defaults(func=run)


def format_line(line: LogLine) -> str:
    return log_line_text(line)


def json_line(line: LogLine) -> str:
    return json.dumps(
        {
            "host": line.host,
            "rank": line.rank,
            "stream": line.stream,
            "line": line.text,
            "job": line.job_id,
            "local_rank": line.local_rank,
            "role": line.role,
            "task_index": line.task_index,
        }
    )


class Printer:
    """Filters a batch by rank and regex and writes it in one call."""

    def __init__(
        self,
        out: TextIO,
        err: TextIO,
        *,
        ranks: Sequence[int] | None,
        grep: re.Pattern[str] | None,
        as_json: bool,
    ) -> None:
        self.out = out
        self.err = err
        self.ranks = set(ranks) if ranks else None
        self.grep = grep
        self.render = json_line if as_json else format_line
        self.printed = 0
        self.received = 0

    def batch(self, batch: LogBatch) -> None:
        for note in batch.notes:
            where = f" {note.path}" if note.path else ""
            detail = f": {note.message}" if note.message else ""
            self.err.write(f"distconsole logs: {note.host}{where}: {note.kind}{detail}\n")
        lines = batch.lines
        self.received += len(lines)
        if self.ranks is not None:
            lines = tuple(ln for ln in lines if ln.rank in self.ranks)
        if self.grep is not None:
            search = self.grep.search
            lines = tuple(ln for ln in lines if search(ln.text))
        if lines:
            self.out.write("\n".join(map(self.render, lines)) + "\n")
            self.printed += len(lines)


async def follow(args: argparse.Namespace, printer: Printer, out: TextIO) -> int:
    inv = inventory_mod.load(args.inventory)
    plan = None
    try:
        plan = JobHistory().get(args.job_id).plan
    except JobError:
        plan = None  # not started from this machine: list the job directory on each host
    if plan is not None:
        # MPI ranks write their logs on the hosts they run on, not only the launcher's.
        names = {la.host for la in plan.launches} | set(plan.hosts_involved)
        hosts = [h for h in inv.hosts if h.name in names]
        targets: list[FollowTarget] = targets_from_plan(plan, [h.name for h in hosts])
        missing = sorted(names - {h.name for h in hosts})
        if missing:
            printer.err.write(
                f"distconsole logs: job {args.job_id} ran on hosts not in {args.inventory}: "
                f"{', '.join(missing)}\n"
            )
    else:
        hosts = list(inv.hosts)
        targets = targets_from_listing(args.job_id, hosts)
    status = 0
    async with ClusterConnections(hosts) as pool:
        statuses = await pool.wait_settled()
        live = []
        for target in targets:
            state = statuses[target.host]
            if not state.is_up and not args.follow:
                printer.err.write(
                    f"distconsole logs: {target.host} is {state.state.value}: {state.reason}\n"
                )
                status = 1
                continue
            live.append(
                HostLogFollower(
                    pool[target.host],
                    target,
                    follow=args.follow,
                    since_start=args.since_start or not args.follow,
                )
            )
        async for batch in follow_hosts(live):
            printer.batch(batch)
            if any(n.kind == "error" for n in batch.notes):
                status = 1
            out.flush()
    if plan is None and printer.received == 0 and not args.follow:
        printer.err.write(
            f"distconsole logs: no log files of job {args.job_id} on "
            f"{', '.join(h.name for h in hosts)} (and it is not in this machine's job history)\n"
        )
        return 1
    return status


def run(args: argparse.Namespace) -> int:
    printer = Printer(sys.stdout, sys.stderr, ranks=args.rank, grep=args.grep, as_json=args.json)
    return asyncio.run(follow(args, printer, sys.stdout))
