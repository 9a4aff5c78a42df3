"""The jobs side of the app: one JobRunner over the app's connections (the SSH backend),
the history, the launch path the launch form drives (``jobs/service.py``'s, the same as
the CLI's: plan, sync, pre-flight, start), and the stream of job rows the jobs screen
shows.

No textual here: the app's workers consume :meth:`JobsService.row_updates` and screens
call the other coroutines from workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shlex
import time
from collections.abc import AsyncIterator
from pathlib import Path

from console.errors import ConsoleError
from console.export.sbatch import backend_script
from console.inventory import Inventory
from console.jobs.backend import JobBackend, SshBackend
from console.jobs.history import JobHistory
from console.jobs.membership import plan_spares
from console.jobs.models import JobPlan
from console.jobs.paths import new_job_id
from console.jobs.report.bundle import make_report
from console.jobs.report.discover import discover
from console.jobs.service import EventCallback, JobService, LaunchEvent
from console.jobs.slurm.backend import SlurmBackend
from console.jobs.slurm.report import make_slurm_report
from console.jobs.slurm.store import SlurmStore
from console.jobs.spec import JobSpec
from console.jobs.ssh.runner import Job, JobRunner, StopReport
from console.jobs.sync.push import TREE_ID_PLACEHOLDER, ProgressCallback, SyncProgress
from console.logs.file_steps import write_bundle_steps
from console.probe.health_check import read_verdicts
from console.settings import DEFAULT_SETTINGS, Settings
from console.transport.pool import ClusterConnections
from console.ui.job_rows import REPORT_HINT as REPORT_HINT
from console.ui.job_rows import JobRow as JobRow
from console.ui.job_rows import membership_view as membership_view
from console.ui.job_rows import row_of_job, row_of_summary, with_pace
from console.ui.job_rows import screen_notes as screen_notes
from console.ui.screens.launch_fields import step_takers
from console.validate.preflight import quick_validation
from console.validate.store import validated_texts

# How often the hosts' job directories are read into the history (jobs_scan: one
# short command per host, within the connection's session budget): often while the jobs
# screen is shown, rarely otherwise. A sweep starts a program on every host, which at
# 64 hosts was a quarter of the console's steady CPU when it ran every 15 s regardless.
DISCOVER_EVERY_S = 15.0
DISCOVER_UNSEEN_S = 120.0
# The first sweep waits until every host has its first GPU sample (``hosts_sampled``, or
# DISCOVER_START_S without one), the jobs screen opens, or DISCOVER_START_MAX_S: at start
# every host is busy with its key exchange and its sampler, and a sweep's program on each
# queues behind them. At 256 demo hosts a sweep 5 s in took the first frame from 8.7 s to
# 14.5 s (11 CPU s of scans on the same cores).
DISCOVER_START_S = 5.0
DISCOVER_START_MAX_S = 60.0


def plan_preview(
    plan: JobPlan, *, port_chosen_at_launch: bool = False, sync: str | None = None
) -> str:
    """The exact per-host commands and environment the launch will run.

    ``port_chosen_at_launch``: the master port is the planner's default, which the
    launch replaces with a port that is free on the master host at that moment.
    ``sync``: the directory put on every host first (the plan's paths are in its copy,
    named by a content id the launch computes)."""
    lines = [f"job {plan.job_id}  kind {plan.kind.value}  world size {plan.world_size}"]
    if sync:
        lines.append(
            f"sync: {sync} is copied to every host first; the processes run in the copy "
            f"({TREE_ID_PLACEHOLDER}: its content hash, computed at launch)"
        )
    if plan.master_addr and plan.master_port is not None:
        master = f"master {plan.master_addr}:{plan.master_port}"
        if port_chosen_at_launch:
            master += "  (placeholder port: the launch takes one free on the master host)"
        lines.append(master)
    elif plan.master_addr:
        lines.append(f"master {plan.master_addr}")
    if plan.total_steps is not None:
        takers, who = step_takers(plan)
        lines.append(
            f"steps: total {plan.total_steps}  per {who} {plan.steps_per_rank}  "
            f"global {(plan.steps_per_rank or 0) * takers}"
            + (f" ({takers} {who}s)" if who == "worker" else "")
            + f"  dropped by the division {plan.steps_dropped or 0}"
        )
    lines += plan.notes
    for warning in plan.warnings:
        lines.append(f"warning: {warning}")
    spares = plan_spares(plan)
    for launch in plan.launches:
        lines.append("")
        spare = "  spare: waits to replace a lost host" if launch.host in spares else ""
        lines.append(f"[{launch.host}] {launch.role} {launch.index}  (cwd {launch.cwd}){spare}")
        lines.append("  $ " + shlex.join(launch.argv))
        for key in sorted(launch.env):
            lines.append(f"    {key}={shlex.quote(launch.env[key])}")
        for log in launch.log_paths:
            lines.append(f"    log: {log.path}")
    return "\n".join(lines)


async def _watch(backend: JobBackend, job_id: str) -> None:
    """Ask the backend until the job ends (each answer updates the history)."""
    with contextlib.suppress(ConsoleError):
        async for _status in backend.watch(job_id):
            pass


class JobsService:
    """Launch, stop and re-attach through one runner; publish every job's row as it changes.

    Rows come from two places: job events of the jobs this console runs (as they
    happen), and the history, read in a thread, for jobs other consoles or the CLI
    started or ended (every ``settings.history_refresh_s``)."""

    def __init__(
        self,
        connections: ClusterConnections,
        inventory: Inventory,
        *,
        settings: Settings = DEFAULT_SETTINGS,
        history: JobHistory | None = None,
        hosts_sampled: asyncio.Event | None = None,
    ) -> None:
        self.inventory = inventory
        self._hosts_sampled = hosts_sampled  # set once every host has its first sample
        self.sweeps_done = 0  # scans of every host for jobs, finished (benches wait on it)
        self.settings = settings
        self.history = history if history is not None else JobHistory()
        self.runner = JobRunner(
            connections, inventory, history=self.history, grace_s=settings.stop_grace_s
        )
        # Pre-flight reads every GPU's verdict too: the form refuses a failing GPU as the
        # CLI does (its pre-flight checkbox is the way on; no exclude/allow choice yet).
        self.backend = SshBackend(self.runner, health=functools.partial(read_verdicts, connections))
        self.service = JobService(self.backend, connections)
        self._changed: asyncio.Queue[JobRow] = asyncio.Queue()
        self._read_rows: dict[str, JobRow] = {}  # each job's last history row (its slow ranks)
        self._following: dict[str, asyncio.Task[None]] = {}
        self._discovering: asyncio.Task[None] | None = None
        self._jobs_in_view = False
        self._discover_now = asyncio.Event()

    async def launch(
        self,
        spec: JobSpec,
        *,
        preflight: bool = True,
        validate: bool = False,
        job_id: str | None = None,
        on_sync: ProgressCallback | None = None,
        on_event: EventCallback | None = None,
    ) -> Job:
        """Plan (free master port from the master host), sync ``spec.sync`` to every host
        (progress to ``on_sync``), pre-flight unless told not to, then start on every host:
        ``jobs/service.py``'s launch, the CLI's too; every step to ``on_event``.
        Raises JobSpecError, PreflightError or JobError; nothing runs when it raises.
        ``job_id``: the one the launch form's preview showed."""
        job_id = job_id or new_job_id(spec.display_name)

        def note(event: LaunchEvent) -> None:
            if on_sync is not None and isinstance(event, SyncProgress):
                on_sync(event)
            if on_event is not None:
                on_event(event)

        try:
            launched = await self.service.launch(
                spec,
                job_id=job_id,
                preflight=preflight,
                validate=quick_validation(
                    self.runner.connections, self.inventory, self.inventory.path
                )
                if validate
                else None,
                on_event=note,
            )
        finally:
            started = self.runner.jobs.get(job_id)
            if started is not None:  # failed starts end as a row too
                self._follow(started)
        return self.runner.jobs[launched.job_id]

    async def submit_slurm(
        self, spec: JobSpec, *, nodes: int, preflight: bool = True, job_id: str | None = None
    ) -> str:
        """Submit ``spec`` as a Slurm batch job on the inventory's login host (the launch
        form's Scheduler: slurm); Slurm's state is then followed into the history, which
        the rows re-read. Raises as ``launch`` does; returns the job id."""
        backend = self._slurm(nodes)
        launched = await JobService(backend, self.runner.connections).launch(
            spec, job_id=job_id, preflight=preflight
        )
        self._following[launched.job_id] = asyncio.create_task(_watch(backend, launched.job_id))
        return launched.job_id

    def _slurm(self, nodes: int = 1) -> SlurmBackend:
        return SlurmBackend(
            self.runner.connections,
            self.inventory,
            write_script=backend_script(self.inventory),
            nodes=nodes,
            history=self.history,
        )

    async def stop(self, job_id: str) -> StopReport:
        job = await self.backend.job(job_id)  # known, else re-attached from the history
        self._follow(job)
        return await self.service.stop(job_id)

    async def attach_unfinished(self) -> list[Job]:
        """Re-attach to jobs of this inventory that may still run (from an earlier console)."""
        jobs = []
        for record in await asyncio.to_thread(self.history.unfinished, self.inventory.path):
            job = await self.runner.attach(record)
            self._follow(job)
            jobs.append(job)
        return jobs

    async def discover(self) -> list[str]:
        """Read the hosts' job directories into the history (jobs started elsewhere,
        states their supervisors recorded); returns hosts that could not be scanned.
        The next history re-read shows what changed."""
        found, _settled = await discover(self.runner.connections, self.inventory, self.history)
        return [f"{host}: {why}" for host, why in found.unreachable.items()]

    def jobs_in_view(self, shown: bool) -> None:
        """The jobs screen was shown (scan now, then every ``DISCOVER_EVERY_S``) or
        left (every ``DISCOVER_UNSEEN_S``)."""
        if shown and not self._jobs_in_view:
            self._discover_now.set()
        self._jobs_in_view = shown

    async def _first_sweep_due(self) -> None:
        waits = [asyncio.ensure_future(self._discover_now.wait())]
        if self._hosts_sampled is not None:
            waits.append(asyncio.ensure_future(self._hosts_sampled.wait()))
            limit = DISCOVER_START_MAX_S
        else:
            limit = DISCOVER_START_S
        try:
            await asyncio.wait(waits, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()

    async def _discover_every(self) -> None:
        if not self._jobs_in_view:
            await self._first_sweep_due()
        while True:
            self._discover_now.clear()
            # A host that cannot be scanned now is scanned again next time; the rows
            # keep what the history holds meanwhile.
            with contextlib.suppress(ConsoleError):
                await self.discover()
            self.sweeps_done += 1
            interval = DISCOVER_EVERY_S if self._jobs_in_view else DISCOVER_UNSEEN_S
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._discover_now.wait(), interval)

    async def report(self, job_id: str, out: Path) -> Path:
        """Write ``job_id``'s post-mortem bundle to ``out``; returns its summary.txt."""
        record = await asyncio.to_thread(self.history.get, job_id)
        if await asyncio.to_thread(lambda: SlurmStore(self.history.path).find(job_id)):
            summary, _bundles = await make_slurm_report(self._slurm(), record, out)
            return summary  # with Slurm's record (slurm.txt)
        validated = await asyncio.to_thread(validated_texts, self.inventory.path)
        summary, _bundles = await make_report(
            self.runner.connections, record, out, validated=validated
        )
        wall = (record.ended or time.time()) - record.started  # effective training time
        await asyncio.to_thread(write_bundle_steps, record.plan, out, wall)  # steps.csv
        return summary

    async def plan_of(self, job_id: str) -> JobPlan:
        """The plan of a job this console runs, else from the history (JobError if unknown)."""
        job = self.runner.jobs.get(job_id)
        if job is not None:
            return job.plan
        return (await asyncio.to_thread(self.history.get, job_id)).plan

    def _follow(self, job: Job) -> None:
        if job.id not in self._following:
            self._following[job.id] = asyncio.create_task(self._follow_events(job))

    async def _follow_events(self, job: Job) -> None:
        async for _event in job.events():
            self._changed.put_nowait(with_pace(row_of_job(job), self._read_rows.get(job.id)))

    async def history_rows(self) -> list[JobRow]:
        """Every job of this inventory in the history, read in a thread (SQLite blocks)."""
        summaries = await asyncio.to_thread(self.history.summaries, inventory=self.inventory.path)
        return [row_of_summary(s) for s in summaries]

    async def row_updates(self) -> AsyncIterator[list[JobRow]]:
        """Every job's row, then batches of the rows that changed: live jobs as their
        events come, the history's rows when a re-read finds them different. A job this
        console runs is shown from its live state, not from its history row."""
        shown: dict[str, JobRow] = {}

        def changed(rows: list[JobRow]) -> list[JobRow]:
            fresh = [r for r in rows if shown.get(r.id) != r]
            shown.update((r.id, r) for r in fresh)
            return fresh

        next_read = 0.0
        loop = asyncio.get_running_loop()
        if self._discovering is None:
            self._discovering = asyncio.create_task(self._discover_every())
        while True:
            if loop.time() >= next_read:
                live = self.runner.jobs
                self._read_rows = {r.id: r for r in await self.history_rows()}
                rows = [r for r in self._read_rows.values() if r.id not in live]
                rows += [with_pace(row_of_job(j), self._read_rows.get(j.id)) for j in live.values()]
                next_read = loop.time() + self.settings.history_refresh_s
            else:
                rows = []
            with contextlib.suppress(TimeoutError):
                timeout = max(0.0, next_read - loop.time())
                rows.append(await asyncio.wait_for(self._changed.get(), timeout))
            while not self._changed.empty():
                rows.append(self._changed.get_nowait())
            batch = changed(rows)
            if batch:
                yield batch

    async def close(self) -> None:
        for task in self._following.values():
            task.cancel()
        if self._discovering is not None:
            self._discovering.cancel()
        await self.runner.close()
