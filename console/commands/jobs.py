"""``distconsole jobs HOSTS [--json]``: the jobs started on an inventory's hosts.

Jobs the history still lists as starting, running or lost are re-attached first: each
host's pgid and exit files are read, the job's policy is applied to what ended while
no console watched (fail-fast, the PS rule), and the history is updated. Exit status
0, or 1 when a host of an unfinished job could not be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from console import inventory as inventory_module
from console.commands.parts import launch_slurm, options
from console.display import plain
from console.inventory import Inventory
from console.jobs.history import JobHistory, JobRecord
from console.jobs.membership import membership, with_spares
from console.jobs.models import JobState
from console.jobs.report.discover import discover
from console.jobs.report.slow_ranks import slow_mark, slow_ranks, slow_words
from console.jobs.service import JobService, make_backend
from console.transport.pool import ClusterConnections


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "jobs",
        help="list the jobs started on these hosts (re-attaching to running ones)",
        description="List the jobs started on an inventory's hosts: id, name, kind, state, "
        "start time and hosts. Jobs still running are re-attached to and reconciled first.",
    )
    options.add_inventory(parser)
    options.add_json(parser, "print a JSON list")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    inventory = inventory_module.load(args.inventory)
    history = JobHistory()
    unreachable, notes = asyncio.run(discover_and_reconcile(inventory, history))
    for note in notes:
        print(f"distconsole jobs: {plain(note)}", file=sys.stderr)
    slurm, slurm_problems = asyncio.run(
        launch_slurm.refresh(inventory, history, history.records(inventory=inventory.path))
    )
    unreachable += slurm_problems
    records = history.records(inventory=inventory.path)
    if args.json:
        json.dump(
            [{**r.summary(), **launch_slurm.json_fields(slurm, r.id)} for r in records],
            sys.stdout,
            indent=2,
        )
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(records) + launch_slurm.detail_lines(slurm))
    for message in unreachable:
        print(f"distconsole jobs: {message}", file=sys.stderr)
    return 1 if unreachable else 0


async def discover_and_reconcile(
    inventory: Inventory, history: JobHistory
) -> tuple[list[str], list[str]]:
    """Read every host's job directories into the history first (the hosts are the
    truth: jobs this machine never started, states their supervisors recorded), then
    re-attach to the unfinished jobs no supervisor settled. Returns (why some jobs could
    not be checked, hosts that could not be scanned)."""
    notes = []
    async with ClusterConnections(inventory) as pool:
        await pool.wait_settled()
        found, settled = await discover(pool, inventory, history)
        notes = [f"{host}: not scanned for jobs: {why}" for host, why in found.unreachable.items()]
        notes += found.skipped
    return await reconcile(inventory, history, skip=set(settled)), notes


async def reconcile(
    inventory: Inventory, history: JobHistory, *, skip: set[str] | None = None
) -> list[str]:
    """Re-attach to every unfinished job once; returns why some could not be checked."""
    pending = [r for r in history.unfinished(inventory.path) if r.id not in (skip or ())]
    if not pending:
        return []
    slurm_jobs = launch_slurm.slurm_ids(history)  # asked of Slurm, not of the hosts
    pending = [r for r in pending if r.id not in slurm_jobs]
    if not pending:
        return []
    known = {h.name for h in inventory.hosts}
    names = sorted({h for r in pending for h in r.hosts if h in known})
    problems = []
    pool = ClusterConnections(inventory.select(names))
    try:
        await pool.wait_settled()
        service = JobService(make_backend("ssh", pool, inventory, history=history), pool)
        for record in pending:
            missing = [h for h in record.hosts if h not in known]
            if missing:
                problems.append(f"{record.id}: hosts {', '.join(missing)} left the inventory")
                continue
            status = await service.status(record.id)
            if status.state is JobState.LOST:
                problems.append(f"{record.id}: lost (a host is not reachable)")
        await service.close()
    finally:
        await pool.close()
    return problems


COLUMNS = ("ID", "NAME", "KIND", "STATE", "STARTED", "HOSTS")


def state_text(record: JobRecord) -> str:
    """The state, with the supervisors' marks: ``running (hung)``, ``succeeded · restart 1``,
    ``running · slow: rank 2``."""
    view = record.host_view or {}
    restarts = view.get("restarts")
    running = record.state is JobState.RUNNING  # a finished job's last slow ranks are history
    return (
        record.state.value
        + (" (hung)" if view.get("hung") else "")
        + (f" · restart {restarts}" if isinstance(restarts, int) and restarts > 0 else "")
        + (
            f" · {hosts}"
            if (hosts := membership(record.hosts, with_spares(view, record.plan)))
            else ""
        )
        + (f" · {mark}" if running and (mark := slow_mark(slow_ranks(view))) else "")
    )


def hosts_text(record: JobRecord) -> str:
    """The job's planned hosts, its spares (--spare-hosts) named apart: a spare is not in
    the job until it replaces a lost host (the state's "3 of 3 hosts" counts it then)."""
    summary = record.summary()
    spares = summary["spare_hosts"]
    rendezvous = summary["rendezvous_host"]  # --rendezvous-host: trains nothing
    return (
        ",".join(summary["hosts"])
        + (f" (spares: {','.join(spares)})" if spares else "")
        + (f" (rendezvous: {rendezvous})" if rendezvous else "")
    )


def render(records: Sequence[JobRecord]) -> str:
    if not records:
        return "no jobs\n"
    # Names and hosts come from job files on the hosts: plain() keeps a newline or an
    # escape in one from making a row of its own or drawing on the terminal.
    rows = [
        [
            plain(r.id),
            plain(r.name),
            r.kind.value,
            plain(state_text(r)),
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.started)),
            plain(hosts_text(r)),
        ]
        for r in records
    ]
    widths = [max(len(row[i]) for row in [list(COLUMNS), *rows]) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    for r in records:
        if r.failure and r.state is JobState.FAILED:
            lines.append(f"{plain(r.id)}: {plain(r.failure.splitlines()[0])}")
        if r.state is JobState.RUNNING:
            # The cause comes from the hosts: plain() as for the names above.
            lines += [
                f"{plain(r.id)}: slow {plain(slow_words(s))}" for s in slow_ranks(r.host_view)
            ]
    return "\n".join(lines) + "\n"
