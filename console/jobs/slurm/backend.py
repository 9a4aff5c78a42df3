"""The Slurm backend: one sbatch script per job, submitted on the inventory's login host.

``launch --scheduler slurm --nodes N`` goes through the same seam as SSH jobs
(:mod:`console.jobs.backend`):

- prepare: the script (written by ``export/sbatch.py``, the one owner of it, handed in
  as a :class:`ScriptWriter` because export sits above jobs) and a plan whose "processes"
  are the job's Slurm tasks, each with its own output file (``srun --output=...-%t.out``)
  in the job directory under the login host's work_dir, plus the batch script's own
  ``batch.out``. The compute nodes see that directory (a shared filesystem, as on every
  Slurm cluster), so the log follower reads every task's output on the login host;
- preflight: sbatch, squeue, scancel and scontrol answer on the login host;
- submit: ``sbatch --parsable`` in the job directory; the history gets the usual row
  plus a ``slurm_jobs`` row (:mod:`console.jobs.slurm.store`);
- watch: ``squeue --json`` every ``poll_s`` while the controller knows the job, then
  the jobcomp/filetxt record; a failed job names the task srun reported;
- stop: ``scancel``, then wait until Slurm says the job has left COMPLETING (every step
  killed on every node): a StopReport with nothing left, or what Slurm still shows;
- logs: the plan, each task's file labelled with its node once Slurm has named the
  allocation (``jobs/slurm/nodes.py``); once the job has ended, the tasks' ``.exit``
  markers are written so a ``logs --follow`` ends as it does for SSH jobs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Protocol

from console.errors import JobError, PreflightError, UsageError
from console.inventory import Host, Inventory, SlurmSettings
from console.jobs import paths
from console.jobs.backend import BackendStatus, Prepared
from console.jobs.history import JobHistory
from console.jobs.models import JobKind, JobPlan, JobState, LogFile, RankLaunch
from console.jobs.plan.ps import DEFAULT_PS_TASKS
from console.jobs.slurm.nodes import BATCH_ROLE, placed, plan_on_nodes
from console.jobs.slurm.state import (
    SlurmJob,
    from_jobcomp,
    from_squeue_json,
    submitted_id,
    task_failures,
)
from console.jobs.slurm.store import SlurmRecord, SlurmStore
from console.jobs.spec import JobSpec
from console.jobs.ssh.job import JobFailure, StopReport
from console.transport.base import HostConnection
from console.transport.ship import with_setup

SCRIPT_NAME = "job.sbatch"
BATCH_OUTPUT = "batch.out"
TASK_STEM = "task"
COMMANDS = ("sbatch", "squeue", "scancel", "scontrol")
COMMAND_TIMEOUT_S = 30.0
STOP_WAIT_S = 60.0  # past the grace: Slurm's KillWait and its epilog


class ScriptWriter(Protocol):
    """``export/sbatch.py``'s script for ``spec`` on ``nodes`` nodes: (script, warnings)."""

    def __call__(
        self, spec: JobSpec, nodes: int, *, task_output: str
    ) -> tuple[str, tuple[str, ...]]: ...


class Connections(Protocol):
    def __getitem__(self, name: str) -> HostConnection: ...


def slurm_settings(inventory: Inventory) -> SlurmSettings:
    if inventory.slurm is None:
        raise UsageError(
            "--scheduler",
            f"slurm needs a slurm: section in {inventory.path} naming the login host "
            "(slurm: {login: HOST}); see the README's Slurm section",
        )
    return inventory.slurm


def task_names(spec: JobSpec, nodes: int) -> list[tuple[str, int]]:
    """(output stem, task number) of every task the script starts, as srun numbers them."""
    gpus = spec.gpus_per_host if spec.gpus_per_host is not None else 1
    if spec.kind is JobKind.DDP:
        return [(TASK_STEM, t) for t in range(nodes)]  # one torchrun per node
    if spec.kind is JobKind.PS:
        ps = spec.ps if spec.ps is not None else DEFAULT_PS_TASKS
        workers = (spec.workers if spec.workers is not None else nodes) + int(spec.chief)
        return [("ps", t) for t in range(ps)] + [("worker", t) for t in range(workers)]
    return [(TASK_STEM, t) for t in range(nodes * gpus)]  # mpi, horovod: one per rank


def slurm_plan(job_id: str, spec: JobSpec, login: Host, nodes: int) -> JobPlan:
    """The job as the console follows it: every task's output file on the login host."""
    out_dir = paths.job_dir(login.work_dir, job_id)
    gpus = spec.gpus_per_host if spec.gpus_per_host is not None else 1
    launches = [
        RankLaunch(
            host=login.name,
            role=BATCH_ROLE,
            index=0,
            argv=("sbatch", SCRIPT_NAME),
            env={},
            cwd=out_dir,
            log_paths=(LogFile(f"{out_dir}/{BATCH_OUTPUT}", "combined", "launcher"),),
        )
    ]
    for stem, t in task_names(spec, nodes):
        if spec.kind is JobKind.DDP:
            # torchrun's own lines, and its workers' prefixed "[rankN]: " with their
            # global rank (the script's TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE): c10d
            # numbers the nodes as they join, so which ranks task t runs is not known here.
            log = LogFile(f"{out_dir}/{stem}-{t}.out", "combined", "launcher")
            ranks: tuple[int, ...] = ()
        elif spec.kind is JobKind.PS:
            # the second step's task 0 is the chief when there is one
            role, index = (stem, t)
            if stem == "worker" and spec.chief:
                role, index = ("chief", 0) if t == 0 else ("worker", t - 1)
            log = LogFile(f"{out_dir}/{stem}-{t}.out", "combined", role, index=index)
            ranks = ()
        else:
            log = LogFile(f"{out_dir}/{stem}-{t}.out", "combined", "rank", rank=t)
            ranks = (t,)
        launches.append(
            RankLaunch(login.name, stem, t, ("srun",), {}, out_dir, (log,), ranks=ranks)
        )
    world = nodes * gpus if spec.kind is not JobKind.PS else len(task_names(spec, nodes))
    return JobPlan(
        job_id=job_id,
        name=spec.display_name,
        kind=spec.kind,
        world_size=world,
        launches=tuple(launches),
        job_dirs={login.name: out_dir},
        hosts_involved=(login.name,),
        fail_fast=spec.fail_fast,
    )


def format_prepared(prepared: Prepared, login: str) -> str:
    """What ``plan --scheduler slurm`` prints (and the launch form previews): the script
    and where each task's output goes."""
    lines = [
        f"job {prepared.job_id} ({prepared.plan.name}): {prepared.plan.kind.value} on Slurm, "
        f"submitted on {login}, world size {prepared.plan.world_size}",
    ]
    lines += [f"warning: {w}" for w in prepared.warnings]
    lines.append("")
    lines.append((prepared.script or "").rstrip())
    lines.append("")
    for launch in prepared.plan.launches:
        for log in launch.log_paths:
            lines.append(f"log ({launch.role} {launch.index}): {login}:{log.path}")
    return "\n".join(lines)


def prepare_offline(
    write_script: ScriptWriter, spec: JobSpec, login: Host, nodes: int, job_id: str
) -> Prepared:
    """The script and plan without asking anyone (``plan``, the launch form's preview)."""
    script, warnings = write_script(spec, nodes, task_output=TASK_STEM)
    plan = slurm_plan(job_id, spec, login, nodes)
    return Prepared(job_id, spec, plan, script=script, warnings=warnings)


class SlurmBackend:
    """Jobs as Slurm batch jobs submitted on the login host (see the module doc)."""

    scheduler = "slurm"

    def __init__(
        self,
        connections: Connections,
        inventory: Inventory,
        *,
        write_script: ScriptWriter | None = None,
        nodes: int = 1,
        history: JobHistory | None = None,
        poll_s: float = 1.0,
    ) -> None:
        self.settings = slurm_settings(inventory)
        self.inventory = inventory
        self.login = inventory.get(self.settings.login)
        self.connections = connections
        self.write_script = write_script
        self.nodes = nodes
        self.history = history if history is not None else JobHistory()
        self.store = SlurmStore(self.history.path)
        self.poll_s = poll_s

    # -- commands on the login host -------------------------------------------------------

    async def _run(self, command: str, *, input: str | None = None) -> tuple[int, str, str]:
        conn = self.connections[self.login.name]
        line = with_setup(self.login.setup, command)
        result = await conn.run(line, timeout=COMMAND_TIMEOUT_S, input=input)
        return result.exit_status, result.stdout, result.stderr

    async def login_command(self, command: str) -> str:
        """``command``'s standard output on the login host (its status is not checked)."""
        return (await self._run(command))[1]

    async def node_names(self, nodelist: str) -> list[str]:
        """``n[1-2]`` -> ``["n1", "n2"]`` (``scontrol show hostnames`` on the login host)."""
        status, out, _err = await self._run(f"scontrol show hostnames {paths.shell_word(nodelist)}")
        return out.split() if status == 0 else []

    async def _place(self, job_id: str, nodelist: str) -> None:
        """Once Slurm names the allocation: the plan labels each task's file with its node."""
        plan = (await asyncio.to_thread(self.history.get, job_id)).plan
        if placed(plan):
            return
        nodes = await self.node_names(nodelist)
        if nodes:
            await asyncio.to_thread(self.history.set_plan, job_id, plan_on_nodes(plan, nodes))

    def _record(self, job_id: str) -> SlurmRecord:
        record = self.store.find(job_id)
        if record is None:
            raise JobError(f"job {job_id} is not a Slurm job of this machine's history")
        return record

    # -- the seam -------------------------------------------------------------------------

    async def prepare(self, spec: JobSpec, *, job_id: str | None = None) -> Prepared:
        if self.write_script is None:
            raise JobError("this Slurm backend was made without a script writer")
        job_id = job_id or paths.new_job_id(spec.display_name)
        return prepare_offline(self.write_script, spec, self.login, self.nodes, job_id)

    async def preflight(self, prepared: Prepared) -> tuple[str, ...]:
        probe = " ; ".join(f"command -v {c} >/dev/null || echo {c}" for c in COMMANDS)
        status, out, err = await self._run(probe)
        missing = out.split()
        if status != 0 or missing:
            what = ", ".join(missing) or err.strip() or f"status {status}"
            raise PreflightError(
                f"{self.login.name} (slurm.login) cannot run the Slurm commands: missing "
                f"{what}; give the login host a setup line that puts them on PATH"
            )
        return ()

    async def submit(self, prepared: Prepared) -> str:
        if prepared.script is None:
            raise JobError(f"job {prepared.job_id} has no batch script")
        out_dir = prepared.plan.job_dirs[self.login.name]
        # The job's directory private (700) and its script (600: it holds the job's env),
        # whatever the login umask; sbatch, whose umask the job inherits, gets it back.
        command = (
            f"distconsole_umask=$(umask) && umask 077 && mkdir -p {paths.shell_word(out_dir)}"
            f" && chmod go-rwx {paths.shell_word(out_dir)} && cd {paths.shell_word(out_dir)}"
            f' && cat > {SCRIPT_NAME} && umask "$distconsole_umask"'
            f" && sbatch --parsable {SCRIPT_NAME}"
        )
        status, out, err = await self._run(command, input=prepared.script)
        slurm_id = submitted_id(out) if status == 0 else None
        if slurm_id is None:
            detail = (err.strip() or out.strip())[-800:]
            raise JobError(
                f"sbatch on {self.login.name} refused job {prepared.job_id} "
                f"(status {status}): {detail}"
            )
        record = SlurmRecord(prepared.job_id, slurm_id, self.login.name, prepared.script, "")
        await asyncio.to_thread(self._add, prepared.plan, record)
        return prepared.job_id

    async def status(self, job_id: str) -> BackendStatus:
        """Ask Slurm once; the history row follows what it says."""
        record = await asyncio.to_thread(self._record, job_id)
        job = await self.slurm_job(record)
        failure = None
        if job.state is JobState.FAILED:
            failure = await self._failure(job_id, job)
        detail = job.describe()
        await asyncio.to_thread(self._save, job_id, job.state, detail, failure)
        if job.nodes:
            await self._place(job_id, job.nodes)
        if job.state.finished:
            await self._mark_ended(job_id)
        return BackendStatus(job_id, job.state, detail, failure)

    async def watch(self, job_id: str) -> AsyncIterator[BackendStatus]:
        last: BackendStatus | None = None
        while True:
            current = await self.status(job_id)
            if current != last:
                yield current
                last = current
            if current.finished:
                return
            await asyncio.sleep(self.poll_s)

    async def stop(self, job_id: str, *, grace_s: float | None = None) -> StopReport:
        record = await asyncio.to_thread(self._record, job_id)
        status, _out, err = await self._run(f"scancel {record.slurm_id}")
        if status != 0 and "already completed" not in err:
            return StopReport(unreachable={self.login.name: f"scancel: {err.strip()}"})
        deadline = time.monotonic() + (grace_s or 0.0) + STOP_WAIT_S
        while True:
            current = await self.status(job_id)
            if current.finished:
                return StopReport()
            if time.monotonic() > deadline:
                return StopReport(remaining={self.login.name: (current.detail,)})
            await asyncio.sleep(self.poll_s)

    async def logs(self, job_id: str) -> JobPlan:
        return (await asyncio.to_thread(self.history.get, job_id)).plan

    async def close(self) -> None:
        return None

    # -- helpers ------------------------------------------------------------------------

    async def slurm_job(self, record: SlurmRecord) -> SlurmJob:
        sid = record.slurm_id
        _status, out, _err = await self._run(f"squeue --json --states=all --jobs={sid}")
        job = from_squeue_json(out, sid)
        if job is not None:
            return job
        # Gone from the controller (MinJobAge): the job-completion record has the end.
        command = (
            "f=$(scontrol show config | sed -n 's/^JobCompLoc *= *//p'); "
            f'[ -r "$f" ] && grep "^JobId={sid} " "$f" | tail -n 1'
        )
        _status, out, _err = await self._run(command)
        job = from_jobcomp(out, sid)
        if job is None:
            raise JobError(
                f"slurm job {sid} is neither in squeue nor in the job-completion record "
                f"(JobCompType=jobcomp/filetxt is needed once it leaves squeue)"
            )
        return job

    async def _failure(self, job_id: str, job: SlurmJob) -> str:
        plan = (await asyncio.to_thread(self.history.get, job_id)).plan
        batch = f"{plan.job_dirs[self.login.name]}/{BATCH_OUTPUT}"
        _status, out, _err = await self._run(f"tail -n 40 {paths.shell_word(batch)}")
        tasks = task_failures(out)
        cause = f"slurm job {job.slurm_id} {job.slurm_state}"
        if job.slurm_state == "TIMEOUT":
            cause += ": the time limit was reached"
        if not tasks:
            code = job.exit_code
            return JobFailure(
                "batch", "script", (), code, cause, tail=tuple(out.splitlines()[-10:])
            ).describe()
        # srun reports each failed task as it ends; the first is the first to fail
        # (fail-fast: --kill-on-bad-exit then ends the others, which may report too).
        first = tasks[0]
        others = "; then " + ", ".join(t.describe() for t in tasks[1:]) if tasks[1:] else ""
        failure = JobFailure(
            first.node,
            f"task {first.tasks}",
            (),
            first.exit_code,
            f"{first.what}; {cause}{others}",
            tail=tuple(out.splitlines()[-10:]),
        )
        return failure.describe()

    def _add(self, plan: JobPlan, record: SlurmRecord) -> None:
        self.history.add(plan, inventory=self.inventory.path)
        self.store.add(record)

    def _save(self, job_id: str, state: JobState, detail: str, failure: str | None) -> None:
        record = self.history.get(job_id)
        if record.state is not state or (failure and record.failure != failure):
            ended = time.time() if state.finished else None
            self.history.set_state(job_id, state, failure=failure, ended=ended)
        self.store.set_detail(job_id, detail)

    async def _mark_ended(self, job_id: str) -> None:
        plan = (await asyncio.to_thread(self.history.get, job_id)).plan
        out_dir = plan.job_dirs[self.login.name]
        markers = [
            paths.exit_file(out_dir, paths.process_name(la.role, la.index)) for la in plan.launches
        ]
        await self._run("touch " + " ".join(paths.shell_word(m) for m in markers))
