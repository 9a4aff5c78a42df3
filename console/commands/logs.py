"""`distconsole logs HOSTS JOB_ID`: every rank's output, rank-prefixed, optionally live.

A line's colours reach the terminal; its other control sequences and characters (a
title, a screen clear) are left out, as ``less -R`` does; ``--raw`` prints them too.

Without ``--follow`` it prints what the log files hold now (from the start) and exits.
With ``--follow`` it starts at the current end of every file (``--since-start``: at the
beginning) and keeps printing until the job's processes have all exited or Ctrl-C;
a host that drops is followed again from the last line printed when it comes back.

The job's hosts are asked first where it stands (their supervisors' records, as
``distconsole jobs`` reads them): a job that has ended is printed from the start and
not followed, and its last line says how it ended (``job ended: failed (...) at
22:14:03``: on stdout with ``--follow``, else on stderr). A followed job's last line
says the same once its processes are gone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from console import inventory as inventory_mod
from console.commands.parts import options
from console.display import job_ended_text, log_line_text
from console.errors import JobError
from console.inventory import Host, Inventory
from console.jobs.history import JobHistory, JobRecord
from console.jobs.report.discover import merge, scan_hosts
from console.logs.follower import FollowTarget, HostLogFollower, follow_hosts
from console.logs.models import LogBatch, LogLine
from console.logs.targets import targets_from_listing, targets_from_plan
from console.transport import ClusterConnections

# After the followed files' writers are done, the leader's supervisor writes the final
# state a moment later: ask the hosts this often, this many times.
ENDED_POLL_S = 0.5
ENDED_POLLS = 20


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
        type=options.whole_number,
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
    shape = parser.add_mutually_exclusive_group()
    shape.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per line: host, rank, stream, line (and job, local_rank, role)",
    )
    shape.add_argument(
        "--raw",
        action="store_true",
        help="print lines as they came, terminal control sequences included (by default "
        "only colours are kept, as `less -R` does)",
    )
    parser.set_defaults(func=run)


def format_line(line: LogLine) -> str:
    return log_line_text(line)


def raw_line(line: LogLine) -> str:
    return log_line_text(line, raw=True)


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
        raw: bool = False,
    ) -> None:
        self.out = out
        self.err = err
        self.ranks = set(ranks) if ranks else None
        self.grep = grep
        self.render = json_line if as_json else raw_line if raw else format_line
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


async def job_ended(
    pool: ClusterConnections,
    inv: Inventory,
    hosts: Sequence[Host],
    history: JobHistory,
    job_id: str,
) -> JobRecord | None:
    """The job's record once its hosts say it has ended, else None. The hosts are the
    truth (``jobs/discover``): their records are merged into the history first, so a job
    this machine never started gets its plan too."""
    try:
        known = [history.get(job_id).id]  # the scan leaves out the plan the history has
    except JobError:
        known = []
    found = await scan_hosts(pool, hosts, known=known)  # a host down: left out
    await asyncio.to_thread(merge, found, history, inv)
    try:
        record = history.get(job_id)
    except JobError:
        return None
    return record if record.state.finished else None


async def follow(args: argparse.Namespace, printer: Printer, out: TextIO) -> int:
    inv = inventory_mod.load(args.inventory)
    history = JobHistory()
    try:
        plan = history.get(args.job_id).plan
    except JobError:
        plan = None  # not started from this machine: its hosts may know it
    # MPI ranks write their logs on the hosts they run on, not only the launcher's.
    names = {la.host for la in plan.launches} | set(plan.hosts_involved) if plan else set()
    scanned = [h for h in inv.hosts if h.name in names] if plan else list(inv.hosts)
    status = 0
    async with ClusterConnections(scanned) as pool:
        statuses = await pool.wait_settled()
        ended = await job_ended(pool, inv, scanned, history, args.job_id)
        if plan is None:
            with contextlib.suppress(JobError):
                plan = history.get(args.job_id).plan  # discovered on its hosts
        following = args.follow and ended is None
        if plan is not None:
            names = {la.host for la in plan.launches} | set(plan.hosts_involved)
            hosts = [h for h in inv.hosts if h.name in names]
            targets: list[FollowTarget] = targets_from_plan(plan, [h.name for h in hosts])
            missing = sorted(names - {h.name for h in hosts})
            if missing:
                printer.err.write(
                    f"distconsole logs: job {args.job_id} ran on hosts not in "
                    f"{args.inventory}: {', '.join(missing)}\n"
                )
        else:
            hosts = list(inv.hosts)
            targets = targets_from_listing(args.job_id, hosts)
        live = []
        for target in targets:
            state = statuses[target.host]
            if not state.is_up and not following:
                printer.err.write(
                    f"distconsole logs: {target.host} is {state.state.value}: {state.reason}\n"
                )
                status = 1
                continue
            live.append(
                HostLogFollower(
                    pool[target.host],
                    target,
                    follow=following,
                    since_start=args.since_start or not following,
                )
            )
        async for batch in follow_hosts(live):
            printer.batch(batch)
            if any(n.kind == "error" for n in batch.notes):
                status = 1
            out.flush()
        if following and plan is not None:
            # The writers are done; the supervisors record the end a moment later.
            for _ in range(ENDED_POLLS):
                ended = await job_ended(pool, inv, hosts, history, args.job_id)
                if ended is not None:
                    break
                await asyncio.sleep(ENDED_POLL_S)
    if plan is None and printer.received == 0 and not args.follow:
        printer.err.write(
            f"distconsole logs: no log files of job {args.job_id} on "
            f"{', '.join(h.name for h in hosts)} (and it is not in this machine's job history)\n"
        )
        return 1
    if ended is not None:
        line = job_ended_text(ended.state.value, ended.ended, ended.failure)
        to = out if args.follow and not args.json else printer.err
        to.write(line + "\n")
        to.flush()
    return status


def run(args: argparse.Namespace) -> int:
    printer = Printer(
        sys.stdout, sys.stderr, ranks=args.rank, grep=args.grep, as_json=args.json, raw=args.raw
    )
    return asyncio.run(follow(args, printer, sys.stdout))
