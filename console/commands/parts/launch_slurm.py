"""The Slurm side of ``plan``, ``launch``, ``jobs`` and ``stop`` (``--scheduler slurm``).

Each command module keeps its SSH path and hands a Slurm job here: ``plan`` prints the
batch script, ``launch`` submits it on the inventory's ``slurm.login`` host and follows
every task's output and Slurm's state until the job ends, ``jobs`` asks Slurm about
unfinished Slurm jobs, ``stop`` is ``scancel`` and a wait until nothing is left. All of
it through the backend seam (:class:`console.jobs.slurm.backend.SlurmBackend`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from console.display import terminal_safe
from console.errors import ConsoleError, UsageError
from console.export.sbatch import backend_script
from console.inventory import Inventory
from console.jobs.backend import SCHEDULERS, Prepared
from console.jobs.history import JobHistory, JobRecord
from console.jobs.models import JobState
from console.jobs.report.bundle import HostBundle
from console.jobs.slurm.backend import Connections, SlurmBackend, slurm_settings
from console.jobs.slurm.backend import format_prepared as format_prepared  # plan.py prints it
from console.jobs.slurm.report import make_slurm_report
from console.jobs.spec import JobSpec
from console.logs.follower import HostLogFollower, follow_hosts
from console.logs.models import rank_key, rank_label
from console.logs.targets import targets_from_plan
from console.transport.pool import ClusterConnections

DRAIN_AFTER_END_S = 3.0


def add_scheduler_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("scheduler")
    group.add_argument(
        "--scheduler",
        metavar="|".join(SCHEDULERS),
        default="ssh",
        help="ssh: start the processes on the hosts (default); slurm: submit one sbatch "
        "script on the inventory's slurm.login host",
    )
    group.add_argument("--nodes", metavar="N", help="slurm: nodes to allocate (default 1)")


def scheduler_of(args: argparse.Namespace) -> str:
    """``ssh`` or ``slurm`` (UsageError names ``--scheduler``/``--nodes``)."""
    scheduler = getattr(args, "scheduler", "ssh") or "ssh"
    if scheduler not in SCHEDULERS:
        raise UsageError("--scheduler", f"{scheduler!r}: choose one of {', '.join(SCHEDULERS)}")
    if scheduler != "slurm" and getattr(args, "nodes", None) is not None:
        raise UsageError("--nodes", "applies to --scheduler slurm (SSH jobs use --hosts)")
    return scheduler


def nodes_of(args: argparse.Namespace) -> int:
    text = getattr(args, "nodes", None)
    if text is None:
        return 1
    if not str(text).isdigit() or int(text) < 1:
        raise UsageError("--nodes", f"must be a whole number >= 1, got {text!r}")
    return int(text)


def backend(
    inventory: Inventory,
    pool: ClusterConnections | None,
    *,
    nodes: int = 1,
    history: JobHistory | None = None,
) -> SlurmBackend:
    connections: Connections = pool if pool is not None else {}
    return SlurmBackend(
        connections,
        inventory,
        write_script=backend_script(inventory),
        nodes=nodes,
        history=history,
    )


def say(message: str) -> None:
    print(f"distconsole: {message}", file=sys.stderr, flush=True)


async def prepare_only(args: argparse.Namespace, spec: JobSpec, inventory: Inventory) -> Prepared:
    return await backend(inventory, None, nodes=nodes_of(args)).prepare(spec)


async def launch(args: argparse.Namespace, spec: JobSpec, inventory: Inventory) -> int:
    login = slurm_settings(inventory).login
    pool = ClusterConnections(inventory.select([login]))
    try:
        await pool.wait_settled()
        slurm = backend(inventory, pool, nodes=nodes_of(args), history=JobHistory())
        prepared = await slurm.prepare(spec)
        for warning in prepared.warnings:
            say(f"warning: {warning}")
        if args.skip_preflight:
            say("pre-flight skipped (--skip-preflight)")
        else:
            for warning in await slurm.preflight(prepared):
                say(warning)
        job_id = await slurm.submit(prepared)
        record = await asyncio.to_thread(slurm.store.find, job_id)
        say(f"job {job_id} submitted on {login}: slurm job {record.slurm_id if record else '?'}")
        if args.detach:
            print(job_id, flush=True)
            return 0
        return await follow(slurm, pool, job_id)
    finally:
        await pool.close()


async def follow(
    slurm: SlurmBackend, pool: ClusterConnections, job_id: str, *, raw: bool = False
) -> int:
    """Print Slurm's state changes and every task's lines until the job ends; Ctrl-C
    (or SIGTERM) cancels it."""
    loop = asyncio.get_running_loop()
    interrupted = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, interrupted.set)
    # The tasks' files appear once the job runs, and by then the plan names each
    # task's node (SlurmBackend.status places them): follow from then on.
    started = asyncio.Event()

    async def stream() -> None:
        await started.wait()
        plan = await slurm.logs(job_id)
        followers = [HostLogFollower(pool[t.host], t) for t in targets_from_plan(plan)]
        async for batch in follow_hosts(followers):
            for line in batch.lines:
                text = line.text if raw else terminal_safe(line.text)
                print(f"[{rank_label(rank_key(line))}] {text}", flush=False)
            sys.stdout.flush()

    final: list[JobState] = []
    failure: list[str] = []

    async def states() -> None:
        async for status in slurm.watch(job_id):
            say(f"job {job_id}: {status.detail}")
            if status.state is not JobState.STARTING:
                started.set()
            if status.finished:
                final.append(status.state)
                if status.failure:
                    failure.append(status.failure)

    streamer = asyncio.create_task(stream())
    watcher = asyncio.create_task(states())
    stop_asked = asyncio.create_task(interrupted.wait())
    try:
        await asyncio.wait({watcher, stop_asked}, return_when=asyncio.FIRST_COMPLETED)
        if stop_asked.done() and not watcher.done():
            say(f"interrupted: cancelling job {job_id} (scancel)")
            report = await slurm.stop(job_id)
            say(report.describe())
            return 130
        watcher.result()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(streamer), DRAIN_AFTER_END_S)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        for task in (streamer, watcher, stop_asked):
            task.cancel()
        await asyncio.gather(streamer, watcher, stop_asked, return_exceptions=True)
    state = final[0] if final else JobState.LOST
    if state is JobState.SUCCEEDED:
        say(f"job {job_id} succeeded")
        return 0
    say(f"job {job_id} {state.value}")
    for text in failure:
        print(text, file=sys.stderr)
    return 1


async def refresh(
    inventory: Inventory, history: JobHistory, records: Sequence[JobRecord]
) -> tuple[dict[str, str], list[str]]:
    """Ask Slurm about the unfinished Slurm jobs among ``records``; returns every Slurm
    job's detail (``slurm 12 PENDING (Resources)``) and why some could not be asked."""
    if inventory.slurm is None:
        return {}, []
    slurm = backend(inventory, None, history=history)
    known = await asyncio.to_thread(slurm.store.all)
    mine = [r for r in records if r.id in known]
    details = {r.id: known[r.id].detail for r in mine}
    pending = [r for r in mine if not r.state.finished]
    if not pending:
        return details, []
    problems: list[str] = []
    async with ClusterConnections(inventory.select([slurm.login.name])) as pool:
        await pool.wait_settled()
        slurm.connections = pool
        for record in pending:
            try:
                details[record.id] = (await slurm.status(record.id)).detail
            except ConsoleError as exc:  # one job's problem is reported, not fatal
                problems.append(f"{record.id}: {exc}")
    return details, problems


def slurm_ids(history: JobHistory) -> set[str]:
    """The console job ids that are Slurm jobs (any inventory)."""
    from console.jobs.slurm.store import SlurmStore

    return set(SlurmStore(history.path).all())


async def stop(inventory: Inventory, history: JobHistory, record: JobRecord, grace: float) -> int:
    slurm_settings(inventory)
    login = inventory.slurm.login if inventory.slurm else ""
    async with ClusterConnections(inventory.select([login])) as pool:
        await pool.wait_settled()
        slurm = backend(inventory, pool, history=history)
        report = await slurm.stop(record.id, grace_s=grace)
        status = await slurm.status(record.id)
    if report.clean:
        print(f"job {record.id} stopped: {status.detail}; {report.describe()}")
        return 0
    print(f"distconsole stop: job {record.id}: {report.describe()}", file=sys.stderr)
    return 1


async def report(
    inventory: Inventory, history: JobHistory, job_id: str, out: Path
) -> tuple[Path, list[HostBundle]]:
    """``report`` of a Slurm job (``commands/report.py`` prints it): the login host's
    job directory and Slurm's record (jobs/slurm/report.py)."""
    login = slurm_settings(inventory).login
    async with ClusterConnections(inventory.select([login])) as pool:
        await pool.wait_settled()
        slurm = backend(inventory, pool, history=history)
        record = await asyncio.to_thread(history.get, job_id)
        return await make_slurm_report(slurm, record, out)


def json_fields(details: dict[str, str], job_id: str) -> dict[str, str]:
    """``jobs --json``'s Slurm fields of one job (none for an SSH job)."""
    if job_id not in details:
        return {}
    return {"scheduler": "slurm", "slurm": details[job_id]}


def detail_lines(details: dict[str, str]) -> str:
    """``jobs``' line per Slurm job: its Slurm id, state and reason or nodes."""
    return "".join(f"{job_id}: {detail}\n" for job_id, detail in details.items() if detail)
