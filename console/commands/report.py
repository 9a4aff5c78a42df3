"""``distconsole report HOSTS JOB_ID [--out DIR]``: a job's post-mortem bundle.

Works for a job in any state, also one this machine never started (it is discovered
from the hosts' job directories first). Writes DIR (default
``./distconsole-report-JOB_ID``): ``summary.txt`` first (what happened, the first
failure or the hang, which rank, where it was stuck), ``plan.json``, ``timeline.txt``
(every host's events merged by time), ``steps.csv`` (time, rank, step, loss, rate,
from the rank logs) and ``hosts/HOST/`` (each process's wrapper with
its exact command and environment, every rank's log, hang captures, GPU samples).
A failed job's summary ends with the GPU health events on its hosts in its time window
and the GPUs failing when the report was made (one fresh sample of each host).
Prints the summary. Exit 0 when every host's directory came, 1 when a host's could not
be fetched (what came is still written), 2 for bad input (unknown job).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from console import inventory as inventory_module
from console.commands.parts import launch_slurm, options
from console.display import plain, plain_lines
from console.errors import JobError, UsageError
from console.inventory import Inventory
from console.jobs.history import JobHistory, JobRecord
from console.jobs.models import JobState
from console.jobs.report.bundle import HostBundle, make_report
from console.jobs.report.discover import discover
from console.logs.file_steps import write_bundle_steps
from console.probe.health import failure_health_lines
from console.probe.health_check import read_views
from console.transport.pool import ClusterConnections
from console.validate.store import validated_texts


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "report",
        help="write a job's post-mortem bundle (summary, plan, commands, timeline, logs)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    options.add_inventory(parser)
    options.add_job_id(parser)
    parser.add_argument(
        "--out",
        metavar="DIR",
        type=Path,
        default=None,
        help="where to write the bundle (default ./distconsole-report-JOB_ID)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    inventory = inventory_module.load(args.inventory)
    out = args.out if args.out is not None else Path(f"distconsole-report-{args.job_id}")
    if out.exists() and not out.is_dir():
        raise UsageError("--out", f"{out} exists and is not a folder")
    return asyncio.run(report(inventory, JobHistory(), args.job_id, out))


async def report(inventory: Inventory, history: JobHistory, job_id: str, out: Path) -> int:
    if job_id in await asyncio.to_thread(launch_slurm.slurm_ids, history):
        # A Slurm job: its directory is on the login host, and Slurm has its record.
        return finish(*await launch_slurm.report(inventory, history, job_id, out), out)
    async with ClusterConnections(inventory) as pool:
        await pool.wait_settled()
        # The hosts first: the job may be unknown here, or its state newer there.
        found, _settled = await discover(pool, inventory, history)
        record = _record(history, job_id, inventory, found.unreachable)
        validated = await asyncio.to_thread(validated_texts, inventory.path)
        summary, bundles = await make_report(pool, record, out, validated=validated)
        hardware = await job_health(pool, inventory, record)
    if hardware:
        with summary.open("a") as f:
            f.write("GPU health on the job's hosts:\n")
            f.writelines(f"  {line}\n" for line in hardware)
    wall = (record.ended or time.time()) - record.started
    await asyncio.to_thread(write_bundle_steps, record.plan, out, wall)
    return finish(summary, bundles, out)


async def job_health(
    pool: ClusterConnections, inventory: Inventory, record: JobRecord
) -> list[str]:
    """A failed job's hosts' health events in its window (see ``failure_health_lines``)."""
    if record.state not in (JobState.FAILED, JobState.LOST):
        return []
    known = {h.name for h in inventory.hosts}
    views = await read_views(pool, [h for h in record.hosts if h in known])
    ended = record.ended or time.time()
    found = "found when this report was made"
    return failure_health_lines(views, record.started, ended, "the job", found=found)


def finish(summary: Path, bundles: Sequence[HostBundle], out: Path) -> int:
    """Print the summary and where the bundle is; 1 when a host's part is missing."""
    # The file keeps what the hosts wrote; the terminal gets no control sequence of theirs.
    sys.stdout.write(plain_lines(summary.read_text(encoding="utf-8", errors="replace")))
    print(f"report written to {out}/", file=sys.stderr)
    failed = [b for b in bundles if b.error]
    for bundle in failed:
        print(f"distconsole report: {bundle.host}: {plain(bundle.error)}", file=sys.stderr)
    return 1 if failed else 0


def _record(
    history: JobHistory, job_id: str, inventory: Inventory, unreachable: dict[str, str]
) -> JobRecord:
    try:
        return history.get(job_id)
    except JobError:
        hosts = ", ".join(h.name for h in inventory.hosts)
        down = "; ".join(f"{h}: {why}" for h, why in unreachable.items())
        raise UsageError(
            "JOB_ID",
            f"no job {job_id!r} in this machine's history nor in the job directories of "
            f"{hosts}" + (f" (not scanned: {down})" if down else ""),
        ) from None
