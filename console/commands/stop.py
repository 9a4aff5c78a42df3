"""``distconsole stop HOSTS JOB_ID [--grace S]``: stop a job on every host.

SIGTERM to every process group of the job (and every process carrying its marker),
SIGKILL after the grace period, then a check that nothing remains. Exit status 0 once
nothing of the job remains, 1 when something survived or a host could not be reached,
2 for bad input (unknown job id, bad --grace).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from console import inventory as inventory_module
from console.commands.launch import grace_seconds
from console.errors import JobError
from console.inventory import Inventory
from console.jobs.history import JobHistory, JobRecord, inventory_key
from console.jobs.paths import valid_job_id
from console.jobs.runner import DEFAULT_GRACE_S, Job, JobRunner
from console.transport.pool import ClusterConnections


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "stop",
        help="stop a job on every host (SIGTERM, then SIGKILL) and check nothing remains",
        description="Stop a job on every host: SIGTERM, SIGKILL after --grace seconds, then "
        "verify that no process of the job remains. Exit 0 once nothing remains.",
    )
    parser.add_argument("hosts", metavar="HOSTS", help="hosts.yaml (or a host file)")
    parser.add_argument("job_id", metavar="JOB_ID", help="as printed by launch or jobs")
    parser.add_argument(
        "--grace",
        type=grace_seconds,
        default=DEFAULT_GRACE_S,
        metavar="S",
        help=f"seconds between SIGTERM and SIGKILL (default {DEFAULT_GRACE_S:g})",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not valid_job_id(args.job_id):
        print(f"distconsole stop: JOB_ID: {args.job_id!r} is not a job id", file=sys.stderr)
        return 2
    inventory = inventory_module.load(args.hosts)
    history = JobHistory()
    try:
        record = history.get(args.job_id)
    except JobError as exc:
        print(f"distconsole stop: JOB_ID: {exc}", file=sys.stderr)
        return 2
    if record.inventory != inventory_key(inventory.path):
        print(
            f"distconsole stop: JOB_ID: job {record.id} was started on {record.inventory}, "
            f"not {inventory_key(inventory.path)}",
            file=sys.stderr,
        )
        return 2
    return asyncio.run(stop(inventory, history, record, args.grace))


async def stop(inventory: Inventory, history: JobHistory, record: JobRecord, grace: float) -> int:
    known = {h.name for h in inventory.hosts}
    missing = [h for h in record.hosts if h not in known]
    if missing:
        raise JobError(f"job {record.id} ran on {', '.join(missing)}, no longer in the inventory")
    pool = ClusterConnections(inventory.select(list(record.hosts)))
    try:
        await pool.wait_settled()
        runner = JobRunner(pool, inventory, history=history, grace_s=grace)
        job = Job.from_record(record)
        runner.jobs[job.id] = job
        report = await runner.stop(job)
    finally:
        await pool.close()
    if report.clean:
        print(f"job {record.id} stopped: {report.describe()}")
        return 0
    print(f"distconsole stop: job {record.id}: {report.describe()}", file=sys.stderr)
    return 1
