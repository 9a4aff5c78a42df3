"""The one launch path: prepare -> sync -> pre-flight -> submit, and stop, for every backend.

``distconsole launch``/``stop``/``jobs`` and the console's launch form and jobs screen
(``ui/jobs_service.py``) call :class:`JobService`; it drives whichever
:class:`~console.jobs.backend.JobBackend` the scheduler names (``ssh``: processes on the
hosts, Ray being one of its kinds; ``slurm``: one sbatch script on the login host) and
reports what happens on the way as :data:`LaunchEvent` values handed to a callback, so
the CLI prints them and the UI shows them without this layer knowing either.

Following a running job stays with the caller: the CLI streams output, the UI shows
rows; both read the backend's ``watch``/``logs`` (or, for SSH, the :class:`Job`'s own
events, which say more: a host lost, the supervisors' verdict).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from console.errors import PreflightError, UsageError
from console.inventory import Inventory
from console.jobs.backend import SCHEDULERS, BackendStatus, JobBackend, Prepared, SshBackend
from console.jobs.history import JobHistory
from console.jobs.preflight.health_gate import HealthCheck
from console.jobs.preflight.probe import PreflightReport
from console.jobs.slurm.backend import Connections, ScriptWriter, SlurmBackend
from console.jobs.spec import JobSpec
from console.jobs.ssh.runner import DEFAULT_GRACE_S, JobRunner, StopReport
from console.jobs.sync.push import HostSync, SyncProgress, scan_for_spec, spec_in_tree, sync_hosts
from console.jobs.sync.tree import SyncTree


@dataclass(frozen=True, slots=True)
class Phase:
    """A step of the launch begins: ``plan``, ``sync``, ``pre-flight``, ``submit``."""

    name: str


@dataclass(frozen=True, slots=True)
class PlanWarning:
    text: str


@dataclass(frozen=True, slots=True)
class PlanNote:
    """A line about the plan that is no problem (``net: tcp on eth0 sets ...``)."""

    text: str


@dataclass(frozen=True, slots=True)
class SyncStarted:
    tree: SyncTree


@dataclass(frozen=True, slots=True)
class HostSynced:
    done: HostSync

    def line(self) -> str:
        done = self.done
        what = (
            "unchanged, reused"
            if done.reused
            else f"{done.objects_sent} files sent ({done.bytes_sent / 1e6:.1f} MB)"
        )
        return f"{done.host}: {done.tree}: {what} in {done.seconds:.2f}s"


@dataclass(frozen=True, slots=True)
class PreflightSkipped:
    pass


@dataclass(frozen=True, slots=True)
class PreflightWarning:
    line: str  # a finding's line: ``WARN [gpu-busy] node1: ...``


@dataclass(frozen=True, slots=True)
class ValidationVerdict:
    """What ``launch --validate``'s quick validation found: the worst state and one line
    per host, GPU or link that is not ok (``node2: warn: CPU limited ...``)."""

    state: str  # ok | warn | fail, the health vocabulary
    lines: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ValidationProgress:
    line: str  # ``node3: compute``, ``pair node3<->node4: 1.2 GB/s``


@dataclass(frozen=True, slots=True)
class ValidationWarning:
    line: str  # a warn of the quick validation: the launch goes on


# The quick validation of the named hosts (console.validate sits above jobs, so the
# caller hands it in, as it does the health check); progress lines to the callback.
PreValidate = Callable[[tuple[str, ...], Callable[[str], None]], Awaitable[ValidationVerdict]]
VALIDATE_SKIP = "launch without --validate to skip it (`distconsole validate` shows every figure)"

LaunchEvent = (
    Phase | PlanWarning | PlanNote | SyncStarted | SyncProgress | HostSynced | PreflightSkipped
    | PreflightWarning | ValidationProgress | ValidationWarning
)  # fmt: skip
EventCallback = Callable[[LaunchEvent], None]


def _ignore(_event: LaunchEvent) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Launched:
    """A submitted job: its id and what was submitted (with ``--sync``, planned in the tree)."""

    job_id: str
    prepared: Prepared


def make_backend(
    scheduler: str,
    connections: Connections,
    inventory: Inventory,
    *,
    history: JobHistory | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    nodes: int = 1,
    write_script: ScriptWriter | None = None,
    health: HealthCheck | None = None,
    allow_unhealthy: bool = False,
) -> JobBackend:
    """The backend ``scheduler`` names. ``write_script`` is ``export/sbatch``'s (export
    sits above jobs, so the caller hands it in); ``nodes`` is Slurm's allocation;
    ``health`` reads GPU verdicts for the SSH pre-flight (probe sits beside jobs, so the
    caller hands it in too; ``allow_unhealthy``: a failing GPU only warns)."""
    if scheduler == "ssh":
        runner = JobRunner(connections, inventory, history=history, grace_s=grace_s)
        return SshBackend(runner, health=health, allow_unhealthy=allow_unhealthy)
    if scheduler == "slurm":
        return SlurmBackend(
            connections, inventory, write_script=write_script, nodes=nodes, history=history
        )
    raise UsageError("--scheduler", f"{scheduler!r}: choose one of {', '.join(SCHEDULERS)}")


def preflight_warnings(error: PreflightError) -> tuple[str, ...]:
    """The warnings a failed pre-flight also found (shown before its failures)."""
    if isinstance(error.report, PreflightReport):
        return tuple(f.line() for f in error.report.warnings)
    return ()


def refuse_validate(scheduler: str, *, preflight: bool) -> None:
    """``--validate`` where it makes no sense: raise UsageError naming it."""
    if scheduler != "ssh":
        raise UsageError(
            "--validate",
            f"applies to --scheduler ssh: with {scheduler} the scheduler picks the nodes when "
            "the job starts (run `distconsole validate` on the partition's hosts instead)",
        )
    if not preflight:
        raise UsageError(
            "--validate", "runs in pre-flight, which --skip-preflight skips: drop one of them"
        )


class JobService:
    """Launch and stop through one backend (see the module doc)."""

    def __init__(self, backend: JobBackend, connections: Connections) -> None:
        self.backend = backend
        self.connections = connections

    @property
    def scheduler(self) -> str:
        return self.backend.scheduler

    async def prepare(self, spec: JobSpec, *, job_id: str | None = None) -> Prepared:
        return await self.backend.prepare(spec, job_id=job_id)

    async def sync(
        self, prepared: Prepared, tree: SyncTree, on_event: EventCallback = _ignore
    ) -> None:
        """Send ``tree`` to every host the plan involves; the plan was made with the
        working directory inside it (``sync_push.spec_in_tree``). Only SSH jobs sync: a
        Slurm job's script was written for its cwd."""
        plan = prepared.plan
        on_event(SyncStarted(tree))
        hosts = list(dict.fromkeys([*(ln.host for ln in plan.launches), *plan.hosts_involved]))
        synced = await sync_hosts(self.connections, hosts, tree, on_event)
        for done in synced.values():
            on_event(HostSynced(done))

    async def preflight(
        self, prepared: Prepared, on_event: EventCallback = _ignore
    ) -> tuple[str, ...]:
        """The backend's checks; warnings go to ``on_event`` (also those of a failed
        pre-flight, before its PreflightError is raised)."""
        try:
            warnings = await self.backend.preflight(prepared)
        except PreflightError as exc:
            for line in preflight_warnings(exc):
                on_event(PreflightWarning(line))
            raise
        for line in warnings:
            on_event(PreflightWarning(line))
        return warnings

    async def validate(
        self, prepared: Prepared, check: PreValidate, on_event: EventCallback = _ignore
    ) -> ValidationVerdict:
        """The quick validation of the plan's hosts: a warn is told and the launch goes
        on, a fail raises PreflightError with its reasons and the way to skip it."""
        plan = prepared.plan
        hosts = tuple(dict.fromkeys([*(ln.host for ln in plan.launches), *plan.hosts_involved]))
        verdict = await check(hosts, lambda line: on_event(ValidationProgress(line)))
        if verdict.state == "fail":
            raise PreflightError(
                "\n".join(["validate --quick failed:", *verdict.lines, VALIDATE_SKIP])
            )
        for line in verdict.lines:
            on_event(ValidationWarning(line))
        return verdict

    async def launch(
        self,
        spec: JobSpec,
        *,
        job_id: str | None = None,
        preflight: bool = True,
        validate: PreValidate | None = None,
        tree: SyncTree | None = None,
        on_event: EventCallback = _ignore,
    ) -> Launched:
        """Plan, sync ``spec.sync`` (``tree`` when the caller scanned it already), pre-flight
        unless told not to (with ``validate``: the quick validation last), then submit.
        Raises JobSpecError, PreflightError or JobError; nothing runs when it raises.
        ``job_id``: the one a preview showed."""
        if validate is not None:
            refuse_validate(self.scheduler, preflight=preflight)
        if self.scheduler != "ssh":
            tree = None
        elif tree is None:
            tree = await asyncio.to_thread(scan_for_spec, spec)  # hashing reads files
        on_event(Phase("plan"))
        prepared = await self.prepare(spec_in_tree(spec, tree), job_id=job_id)
        for note in prepared.plan.notes:
            on_event(PlanNote(note))
        for warning in prepared.warnings:
            on_event(PlanWarning(warning))
        if tree is not None:
            on_event(Phase("sync"))
            await self.sync(prepared, tree, on_event)
        if preflight:
            on_event(Phase("pre-flight"))
            await self.preflight(prepared, on_event)
            if validate is not None:
                on_event(Phase("validate"))
                await self.validate(prepared, validate, on_event)
        else:
            on_event(PreflightSkipped())
        on_event(Phase("submit"))
        return Launched(await self.backend.submit(prepared), prepared)

    async def stop(self, job_id: str, *, grace_s: float | None = None) -> StopReport:
        return await self.backend.stop(job_id, grace_s=grace_s)

    async def status(self, job_id: str) -> BackendStatus:
        """Ask the backend once where ``job_id`` stands (an SSH job is re-attached to,
        unwatched; a Slurm job is asked of Slurm); the history follows."""
        return await self.backend.status(job_id)

    async def close(self) -> None:
        await self.backend.close()
