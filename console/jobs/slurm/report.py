"""The report bundle of a Slurm job: the SSH report's bundle plus what Slurm knows.

``distconsole report`` hands a Slurm job here (``commands/launch_slurm.report``). The
job's one directory is on the login host (the shared filesystem): :func:`make_report`
packs it as for any job, so ``hosts/LOGIN/`` holds the batch script (``job.sbatch``),
``batch.out`` (srun's own reports, the failed task named there) and every task's
output file. This module adds ``slurm.txt``: the Slurm job id, Slurm's last word on it
(``squeue --json`` while the controller knows the job, else its jobcomp record,
verbatim), ``scontrol show job`` while it is known, and which node each task ran on;
and the same short account at the end of ``summary.txt``.

Which node ran a task follows from the allocation's node list and how the script
places its tasks (``jobs/slurm/nodes.py``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from console.errors import ConsoleError, JobError
from console.jobs.history import JobRecord
from console.jobs.private import write_private
from console.jobs.report.bundle import HostBundle, make_report
from console.jobs.slurm.backend import SlurmBackend
from console.jobs.slurm.nodes import task_nodes
from console.jobs.slurm.state import SlurmJob
from console.jobs.slurm.store import SlurmRecord

SLURM_FILE = "slurm.txt"


def slurm_lines(record: SlurmRecord, job: SlurmJob | None, placed: dict[str, str]) -> list[str]:
    """The Slurm part of ``summary.txt``."""
    lines = [f"scheduler: slurm job {record.slurm_id}, submitted on {record.login}"]
    lines.append("slurm: " + (job.describe() if job is not None else record.detail or "?"))
    if placed:
        lines.append("tasks: " + ", ".join(f"{task} on {node}" for task, node in placed.items()))
    lines.append(f"Slurm's record: {SLURM_FILE}; the batch script: hosts/{record.login}/job.sbatch")
    return lines


async def make_slurm_report(
    slurm: SlurmBackend, record: JobRecord, out: Path
) -> tuple[Path, list[HostBundle]]:
    """Ask Slurm about the job once more (the history follows), write the bundle and
    ``slurm.txt``; returns the summary's path and the login host's bundle."""
    slurm_record = await asyncio.to_thread(slurm.store.find, record.id)
    if slurm_record is None:
        raise JobError(f"job {record.id} is not a Slurm job of this machine's history")
    sid = slurm_record.slurm_id
    job: SlurmJob | None = None
    problem = ""
    try:
        await slurm.status(record.id)
        job = await slurm.slurm_job(slurm_record)
    except ConsoleError as exc:  # the report is still written, and says why
        problem = f"Slurm was not asked: {exc}"
    record = await asyncio.to_thread(slurm.history.get, record.id)
    summary, bundles = await make_report(slurm.connections, record, out)
    squeue = await _ask(slurm, f"squeue --json --states=all --jobs={sid}")
    scontrol = await _ask(slurm, f"scontrol show job -d {sid}")
    jobcomp = await _ask(
        slurm,
        "f=$(scontrol show config | sed -n 's/^JobCompLoc *= *//p'); "
        f'[ -r "$f" ] && grep "^JobId={sid} " "$f"',
    )
    nodes: list[str] = []
    if job is not None and job.nodes:
        try:
            nodes = await slurm.node_names(job.nodes)
        except ConsoleError:
            nodes = []
    placed = task_nodes(record.plan, nodes)
    text = [f"slurm job {sid} (console job {record.id}), submitted on {slurm_record.login}"]
    if problem:
        text.append(problem)
    text += ["", "== task -> node", *(f"{t}: {n}" for t, n in placed.items())]
    text += ["", "== scontrol show job -d", scontrol.strip() or "(not known to the controller)"]
    text += ["", "== jobcomp record", jobcomp.strip() or "(none)"]
    text += ["", "== squeue --json", squeue.strip() or "(not listed)"]
    await asyncio.to_thread(
        _write, out / SLURM_FILE, text, summary, slurm_lines(slurm_record, job, placed)
    )
    return summary, bundles


async def _ask(slurm: SlurmBackend, command: str) -> str:
    try:
        return await slurm.login_command(command)
    except ConsoleError as exc:
        return f"(not asked: {exc})"


def _write(slurm_file: Path, text: list[str], summary: Path, lines: list[str]) -> None:
    write_private(slurm_file, "\n".join(text) + "\n")
    with summary.open("a") as f:
        f.write("\n".join(lines) + "\n")
