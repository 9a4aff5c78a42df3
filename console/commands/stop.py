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
from console.commands.parts import launch_slurm, options
from console.errors import JobError, UsageError
from console.inventory import Inventory
from console.jobs.history import JobHistory, JobRecord, inventory_key
from console.jobs.service import JobService, make_backend
from console.jobs.slurm.backend import slurm_settings
from console.jobs.ssh.runner import DEFAULT_GRACE_S
from console.transport.pool import ClusterConnections


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "stop",
        help="stop a job on every host (SIGTERM, then SIGKILL) and check nothing remains",
        description="Stop a job on every host: SIGTERM, SIGKILL after --grace seconds, then "
        "verify that no process of the job remains. Exit 0 once nothing remains.",
    )
    options.add_inventory(parser)
    options.add_job_id(parser)
    options.add_grace(parser, DEFAULT_GRACE_S)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    inventory = inventory_module.load(args.inventory)
    history = JobHistory()
    try:
        record = history.get(args.job_id)
    except JobError as exc:
        raise UsageError("JOB_ID", str(exc)) from None
    if record.inventory != inventory_key(inventory.path):
        raise UsageError(
            "JOB_ID",
            f"job {record.id} was started on {record.inventory}, "
            f"not {inventory_key(inventory.path)}",
        )
    scheduler = "slurm" if record.id in launch_slurm.slurm_ids(history) else "ssh"
    return asyncio.run(stop(inventory, history, record, args.grace, scheduler=scheduler))


async def stop(
    inventory: Inventory,
    history: JobHistory,
    record: JobRecord,
    grace: float,
    *,
    scheduler: str = "ssh",
) -> int:
    if scheduler == "slurm":
        hosts = [slurm_settings(inventory).login]  # scancel runs there
    else:
        known = {h.name for h in inventory.hosts}
        missing = [h for h in record.hosts if h not in known]
        if missing:
            raise JobError(
                f"job {record.id} ran on {', '.join(missing)}, no longer in the inventory"
            )
        hosts = list(record.hosts)
    async with ClusterConnections(inventory.select(hosts)) as pool:
        await pool.wait_settled()
        backend = make_backend(scheduler, pool, inventory, history=history, grace_s=grace)
        service = JobService(backend, pool)
        try:
            report = await service.stop(record.id, grace_s=grace)
            # Slurm's own words once it let go ("slurm 12 CANCELLED"), as `jobs` shows them.
            detail = f"{(await service.status(record.id)).detail}; " if scheduler == "slurm" else ""
        finally:
            await service.close()
    if report.clean:
        print(f"job {record.id} stopped: {detail}{report.describe()}")
        return 0
    print(f"distconsole stop: job {record.id}: {report.describe()}", file=sys.stderr)
    return 1
