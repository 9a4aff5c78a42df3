"""The jobs side of the app: one JobRunner over the app's connections, the history, and
the launch path (plan, pre-flight, start) the launch form drives.

No textual here: screens call these coroutines from workers and show what they return.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from console.inventory import Inventory
from console.jobs.history import JobHistory, JobRecord
from console.jobs.models import JobPlan, JobState
from console.jobs.placement import place
from console.jobs.preflight import preflight_plan
from console.jobs.runner import Job, JobRunner, StopReport
from console.jobs.spec import JobSpec
from console.transport.pool import ClusterConnections


@dataclass(frozen=True, slots=True)
class JobRow:
    """One line of the jobs screen, from a live Job or a history record."""

    id: str
    name: str
    kind: str
    state: JobState
    started: float
    ended: float | None
    hosts: tuple[str, ...]
    ranks: int
    failure: str

    def duration(self, now: float) -> float:
        return (self.ended or now) - self.started


def row_of_job(job: Job) -> JobRow:
    failure = job.failure.describe() if job.failure else ""
    return JobRow(
        job.id, job.plan.name, job.plan.kind.value, job.state, job.started, job.ended,
        job.hosts, job.plan.world_size, failure,
    )  # fmt: skip


def row_of_record(record: JobRecord) -> JobRow:
    return JobRow(
        record.id, record.name, record.kind.value, record.state, record.started, record.ended,
        record.hosts, record.plan.world_size, record.failure or "",
    )  # fmt: skip


def plan_preview(plan: JobPlan, *, port_chosen_at_launch: bool = False) -> str:
    """The exact per-host commands and environment the launch will run.

    ``port_chosen_at_launch``: the master port is the planner's default, which the
    launch replaces with a port that is free on the master host at that moment."""
    lines = [f"job {plan.job_id}  kind {plan.kind.value}  world size {plan.world_size}"]
    if plan.master_addr and plan.master_port is not None:
        master = f"master {plan.master_addr}:{plan.master_port}"
        if port_chosen_at_launch:
            master += "  (placeholder port: the launch takes one free on the master host)"
        lines.append(master)
    elif plan.master_addr:
        lines.append(f"master {plan.master_addr}")
    if plan.total_steps is not None:
        lines.append(
            f"steps: total {plan.total_steps}  per GPU {plan.steps_per_rank}  "
            f"global {(plan.steps_per_rank or 0) * plan.world_size}  "
            f"dropped by the division {plan.steps_dropped or 0}"
        )
    for warning in plan.warnings:
        lines.append(f"warning: {warning}")
    for launch in plan.launches:
        lines.append("")
        lines.append(f"[{launch.host}] {launch.role} {launch.index}  (cwd {launch.cwd})")
        lines.append("  $ " + shlex.join(launch.argv))
        for key in sorted(launch.env):
            lines.append(f"    {key}={shlex.quote(launch.env[key])}")
        for log in launch.log_paths:
            lines.append(f"    log: {log.path}")
    return "\n".join(lines)


class JobControl:
    def __init__(
        self,
        connections: ClusterConnections,
        inventory: Inventory,
        *,
        history: JobHistory | None = None,
    ) -> None:
        self.inventory = inventory
        self.history = history if history is not None else JobHistory()
        self.runner = JobRunner(connections, inventory, history=self.history)

    async def launch(
        self, spec: JobSpec, *, preflight: bool = True, job_id: str | None = None
    ) -> Job:
        """Plan (free master port from the master host), pre-flight unless told not to,
        then start on every host. Raises JobSpecError, PreflightError or JobError; nothing
        runs when it raises. ``job_id``: the one the launch form's preview showed."""
        plan = await self.runner.prepare(spec, job_id=job_id)
        if preflight:
            slots = {ph.name: ph.slots for ph in place(spec, self.inventory, plan.job_id).hosts}
            report = await preflight_plan(
                self.runner.connections, plan, self.inventory, slots=slots, interface=spec.interface
            )
            report.raise_if_failed()
        return await self.runner.launch(plan)

    async def stop(self, job_id: str) -> StopReport:
        job = self.runner.jobs.get(job_id)
        if job is None:
            job = await self.runner.attach(self.history.get(job_id), watch=False)
        return await self.runner.stop(job)

    async def attach_unfinished(self) -> list[Job]:
        """Re-attach to jobs of this inventory that may still run (from an earlier console)."""
        jobs = []
        for record in self.history.unfinished(self.inventory.path):
            jobs.append(await self.runner.attach(record))
        return jobs

    def rows(self) -> list[JobRow]:
        """Every job of this inventory, newest first; live jobs override their history row."""
        live = {job.id: row_of_job(job) for job in self.runner.jobs.values()}
        rows = [row_of_record(r) for r in self.history.records(inventory=self.inventory.path)]
        rows = [live.pop(r.id) if r.id in live else r for r in rows]
        rows.extend(live.values())
        return sorted(rows, key=lambda r: r.started, reverse=True)

    async def close(self) -> None:
        await self.runner.close()
