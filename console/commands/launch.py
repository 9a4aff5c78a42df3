"""``distconsole launch HOSTS --kind KIND [options] -- PROGRAM [ARGS...]``.

Plans the job (a free master port picked on the master host when none is given), runs
the pre-flight checks, starts every process detached on its host and streams their
output, each line prefixed with its host and rank, until the job ends. Exit status:
0 succeeded, 1 failed (or refused), 2 bad input, 130 interrupted (the job was stopped
on every host first). ``--detach`` prints the job id once it runs and returns.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from console import inventory as inventory_module
from console.commands.parts import launch_slurm, options
from console.commands.parts.job_options import naming_options, register_job_command, spec_from_args
from console.display import plain, plain_lines, terminal_safe
from console.export.sbatch import backend_script
from console.inventory import Inventory
from console.jobs.backend import SshBackend
from console.jobs.history import JobHistory
from console.jobs.models import JobPlan, JobState
from console.jobs.paths import exit_file, rank_done, supervisor_states
from console.jobs.plan.placement import place
from console.jobs.preflight.health_gate import exclude_unhealthy
from console.jobs.service import (
    HostSynced,
    JobService,
    LaunchEvent,
    PlanNote,
    PlanWarning,
    PreflightSkipped,
    PreflightWarning,
    SyncStarted,
    ValidationProgress,
    ValidationWarning,
    make_backend,
    refuse_validate,
)
from console.jobs.slurm.backend import SlurmBackend, slurm_settings
from console.jobs.spec import JobSpec
from console.jobs.ssh import remote_ops
from console.jobs.ssh.runner import DEFAULT_GRACE_S, Job, JobRunner
from console.jobs.ssh.supervision import supervised_hosts
from console.jobs.sync.push import SyncProgress, scan_for_spec
from console.jobs.sync.tree import SyncTree
from console.logs.follower import FollowTarget, HostLogFollower, follow_hosts
from console.logs.models import rank_key, rank_label
from console.logs.prefixes import FileContext, context_for
from console.probe.health import failure_health_lines
from console.probe.health_check import read_verdicts, read_views
from console.transport.base import HostConnection
from console.transport.pool import ClusterConnections
from console.validate.preflight import quick_validation

DRAIN_AFTER_END_S = 3.0  # how long output may still arrive once the job has ended


def register(sub: Any) -> None:
    register_job_command(
        sub,
        "launch",
        help="start a job on its hosts and stream its output until it ends",
        run=run,
        extra=add_launch_options,
    )


def add_launch_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--detach", action="store_true", help="print the job id once it runs and return"
    )
    parser.add_argument(
        "--skip-preflight", action="store_true", help="start even if pre-flight checks fail"
    )
    parser.add_argument(
        "--validate",
        action="store_true",
        help="run `validate --quick` on the job's hosts as the last pre-flight step: a fail "
        "stops the launch, a warn is printed (ssh scheduler only)",
    )
    unhealthy = parser.add_mutually_exclusive_group()
    unhealthy.add_argument(
        "--exclude-unhealthy",
        action="store_true",
        help="leave out GPUs whose health check fails (the host when too few are left)",
    )
    unhealthy.add_argument(
        "--allow-unhealthy",
        action="store_true",
        help="start even on GPUs whose health check fails (pre-flight only warns)",
    )
    parser.add_argument(
        "--raw",
        action="store_true",
        help="print the job's output as it came, terminal control sequences included (by "
        "default only colours are kept, as `less -R` does)",
    )
    options.add_grace(parser, DEFAULT_GRACE_S)
    launch_slurm.add_scheduler_options(parser)


def say(message: str) -> None:
    print(f"distconsole: {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    inventory = inventory_module.load(args.inventory)
    scheduler = launch_slurm.scheduler_of(args)
    if getattr(args, "validate", False):
        refuse_validate(scheduler, preflight=not args.skip_preflight)
    if scheduler == "slurm":
        login = slurm_settings(inventory).login
        return asyncio.run(launch(args, spec, inventory, (login,), scheduler=scheduler))
    with naming_options():
        # The spares and the rendezvous host too: their processes are launched (--hosts
        # names only the job's own).
        placed = place(spec, inventory, "launch")
    with naming_options():
        tree = scan_for_spec(spec)
    names = tuple(placed.job_dirs)
    return asyncio.run(launch(args, spec, inventory, names, tree))


class LaunchPrinter:
    """The launch's events on stderr; sync progress each phase once per host, sending
    at most every 10 %."""

    def __init__(self) -> None:
        self.shown: dict[str, tuple[str, int]] = {}

    def __call__(self, event: LaunchEvent) -> None:
        if isinstance(event, PlanNote):
            say(event.text)
        elif isinstance(event, PlanWarning):
            say(f"warning: {event.text}")
        elif isinstance(event, SyncStarted):
            say(f"sync: {event.tree.describe()}")
        elif isinstance(event, SyncProgress):
            self.progress(event)
        elif isinstance(event, HostSynced):
            say(f"sync {event.line()}")
        elif isinstance(event, PreflightSkipped):
            say("pre-flight skipped (--skip-preflight)")
        elif isinstance(event, PreflightWarning):
            say(event.line)
        elif isinstance(event, ValidationProgress):
            say(f"validate: {event.line}")
        elif isinstance(event, ValidationWarning):
            say(f"validate: WARN {event.line}")

    def progress(self, progress: SyncProgress) -> None:
        tenth = progress.bytes_done * 10 // progress.bytes_total if progress.bytes_total else 0
        key = (progress.phase, tenth)
        if self.shown.get(progress.host) != key:
            self.shown[progress.host] = key
            say(f"sync {progress.line()}")


async def launch(
    args: argparse.Namespace,
    spec: JobSpec,
    inventory: Inventory,
    host_names: tuple[str, ...],
    tree: SyncTree | None = None,
    *,
    scheduler: str = "ssh",
) -> int:
    pool = ClusterConnections(inventory.select(list(host_names)))
    try:
        await pool.wait_settled()
        ssh = scheduler == "ssh"
        if ssh and getattr(args, "exclude_unhealthy", False):
            rows = await read_verdicts(pool, host_names)
            inventory, spec, notes = exclude_unhealthy(inventory, spec, host_names, rows)
            for note in notes:
                say(f"health: {note}")
            host_names = spec.hosts
        backend = make_backend(
            scheduler,
            pool,
            inventory,
            history=JobHistory(),
            grace_s=args.grace,
            nodes=launch_slurm.nodes_of(args) if scheduler == "slurm" else 1,
            write_script=backend_script(inventory) if scheduler == "slurm" else None,
            health=functools.partial(read_verdicts, pool) if ssh else None,
            allow_unhealthy=getattr(args, "allow_unhealthy", False),
        )
        if isinstance(backend, SshBackend):
            backend.runner.require_up(host_names, what="the job")
        service = JobService(backend, pool)
        with naming_options():
            launched = await service.launch(
                spec,
                preflight=not args.skip_preflight,
                validate=quick_validation(pool, inventory, args.inventory)
                if getattr(args, "validate", False)
                else None,
                tree=tree,
                on_event=LaunchPrinter(),
            )
        if isinstance(backend, SlurmBackend):
            record = await asyncio.to_thread(backend.store.find, launched.job_id)
            say(
                f"job {launched.job_id} submitted on {backend.login.name}: "
                f"slurm job {record.slurm_id if record else '?'}"
            )
            if args.detach:
                print(launched.job_id, flush=True)
                return 0
            return await launch_slurm.follow(backend, pool, launched.job_id, raw=args.raw)
        assert isinstance(backend, SshBackend)  # make_backend's other kind
        job = backend.runner.jobs[launched.job_id]
        say(f"job {job.id} running: {describe_processes(job)}")
        if args.detach:
            print(job.id, flush=True)
            return 0
        return await watch(backend.runner, job, raw=args.raw)
    finally:
        await pool.close()


def describe_processes(job: Job) -> str:
    return ", ".join(f"{p.host}:{p.name} (pgid {p.pgid})" for p in job.processes.values())


def host_lost_line(plan: JobPlan, host: str | None, message: str | None) -> str:
    """What an attached ``launch`` says when ``host`` stops answering: an elastic job
    (--min-hosts) goes on without any host but its leader (the rendezvous and the
    leader supervisor), whose loss ends it."""
    said = message or f"{host}: connection lost"
    if not plan.min_hosts:
        return f"{said}; the other hosts' supervisors stop the job"
    leaders = supervised_hosts(plan)
    if leaders and host == leaders[0]:
        return (
            f"{said}; this ends the job: {host} holds its rendezvous and its leader "
            "supervisor (the other hosts' supervisors stop the rest)"
        )
    return f"{said}; the job goes on without it while --min-hosts {plan.min_hosts} remain"


async def watch(runner: JobRunner, job: Job, *, raw: bool = False) -> int:
    """Stream output until the job ends; Ctrl-C (or SIGTERM) stops it everywhere."""
    loop = asyncio.get_running_loop()
    interrupted = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, interrupted.set)
    lost = asyncio.Event()

    async def note_lost() -> None:
        async for event in job.events():
            if event.host_lost:
                # The supervisors stop the rest and record the verdict: wait for it.
                say(host_lost_line(job.plan, event.host, event.message))
            elif event.state is JobState.LOST:
                say(event.message or "a host of the job went away")
                lost.set()

    streamer = asyncio.create_task(stream_output(job, runner.connections, raw=raw))
    lost_task = asyncio.create_task(note_lost())
    ended = asyncio.create_task(job.wait())
    stop_asked = asyncio.create_task(interrupted.wait())
    lost_wait = asyncio.create_task(lost.wait())
    try:
        await asyncio.wait({ended, stop_asked, lost_wait}, return_when=asyncio.FIRST_COMPLETED)
        if stop_asked.done() and not job.finished:
            say(f"interrupted: stopping job {job.id} on every host")
            report = await runner.stop(job)
            say(report.describe())
            return 130
        if lost_wait.done() and not job.finished:
            say(f"job {job.id} is lost; `distconsole jobs` re-attaches once the host is back")
            return 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(streamer), DRAIN_AFTER_END_S)
        hardware = await failure_health(runner, job) if job.failure is not None else []
        return report_end(job, hardware)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        for task in (streamer, lost_task, ended, stop_asked, lost_wait):
            task.cancel()
        await asyncio.gather(
            streamer, lost_task, ended, stop_asked, lost_wait, return_exceptions=True
        )


async def failure_health(runner: JobRunner, job: Job) -> list[str]:
    """The health events on the job's hosts around its failure (one fresh sample each)."""
    failure = job.failure
    if failure is None:
        return []
    # A host that went away has no sample to give: asking would only wait out the read
    # bound before the verdict is printed.
    reachable = [
        h for h in job.hosts if h not in job.lost_hosts and runner.connections[h].status.is_up
    ]
    views = await read_views(runner.connections, reachable)
    who = f"{failure.host} {failure.process}".strip()
    if failure.ranks:
        who += f" (rank {failure.ranks[0]})"
    failed_at = failure.ended_at or job.ended or time.time()
    return failure_health_lines(views, job.started, failed_at, who)


def report_end(job: Job, hardware: Sequence[str] = ()) -> int:
    if job.state is JobState.SUCCEEDED:
        say(f"job {job.id} succeeded")
    elif job.state is JobState.STOPPED and job.stopped_elsewhere:
        say(f"job {job.id} was stopped (by `distconsole stop` or another console)")
    else:
        say(f"job {job.id} {job.state.value}")
        if job.failure is not None:
            # Its lines are the ranks' and the hosts' own: no control sequence of theirs
            # reaches the terminal (each line stays a line).
            print(plain_lines(job.failure.describe()), file=sys.stderr)
        if hardware:
            print("GPU health on the job's hosts:", file=sys.stderr)
            for line in hardware:
                print(f"  {plain(line)}", file=sys.stderr)
    if job.stop_report is not None and not job.stop_report.clean:
        print(job.stop_report.describe(), file=sys.stderr)
    return 0 if job.state is JobState.SUCCEEDED else 1


def follow_targets(plan: JobPlan) -> list[FollowTarget]:
    """Per host: every process's own output files (torchrun puts its ranks' prefixed
    lines there), done once all the host's exit files exist; and every MPI / Horovod
    rank's own files on the host it runs on, done at its ``done`` marker: those ranks
    hand their launcher none of their output, which is mpirun's own messages alone."""
    files: dict[str, list[FileContext]] = defaultdict(list)
    markers: dict[str, list[str]] = defaultdict(list)
    for launch in plan.launches:
        job_dir = remote_ops.host_job_dir(plan, launch.host)
        for log in remote_ops.own_log_files(launch, job_dir):
            files[launch.host].append(context_for(plan.job_id, launch.host, log, launch))
        markers[launch.host].append(exit_file(job_dir, remote_ops.process_name(launch)))
        for log in launch.log_paths:
            if log.role != "rank" or log.host is None:
                continue  # only ranks a launcher starts on their own hosts (mpi_ranks.py)
            files[log.host].append(context_for(plan.job_id, log.host, log, launch))
            if log.rank is not None and log.stream == "stdout":
                where = remote_ops.host_job_dir(plan, log.host)
                markers[log.host].append(rank_done(where, log.rank))
    return [
        FollowTarget(
            plan.job_id,
            host,
            files=tuple(found),
            done_markers=tuple(markers[host]),
            supervisor_states=supervisor_states(remote_ops.host_job_dir(plan, host), host),
        )
        for host, found in files.items()
    ]


async def stream_output(job: Job, connections: Any, *, raw: bool = False) -> None:
    """Every line as ``[host rank] text``, its text :func:`terminal_safe` unless ``raw``."""
    shown = (lambda text: text) if raw else terminal_safe
    followers = []
    for target in follow_targets(job.plan):
        conn: HostConnection = connections[target.host]
        followers.append(HostLogFollower(conn, target))
    async for batch in follow_hosts(followers):
        for line in batch.lines:
            label = rank_label(rank_key(line))
            print(f"[{line.host} {label}] {shown(line.text)}", flush=False)
        for note in batch.notes:
            if note.kind in ("error", "disconnected"):
                say(f"{note.host}: log follower {note.kind} {note.message}".rstrip())
        sys.stdout.flush()
