"""Which node runs each task of a Slurm job: pure functions of the plan and the
allocation's node list (Slurm's order, ``scontrol show hostnames``).

The batch script (``export/sbatch.py``) places the tasks, so their nodes follow from
the node list alone: ddp one task per node in order, mpi/horovod ``--ntasks-per-node``
ranks per node in blocks, ps each step round-robin over the nodes from the first
(``--distribution=cyclic --relative=0``). The backend writes the nodes into the plan
once Slurm names them (``LogFile.node``: each task's lines are labelled with its node);
the report lists them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from console.jobs.models import JobKind, JobPlan, RankLaunch

BATCH_ROLE = "batch"  # the batch script's own output: on the first node, read as is


def task_key(launch: RankLaunch) -> str:
    """``task 0``, ``ps 1``, ``worker 2``: a task by its step's output stem and number."""
    return f"{launch.role} {launch.index}"


def task_nodes(plan: JobPlan, nodes: Sequence[str]) -> dict[str, str]:
    """``{"task 0": "n1", "ps 0": "n1", ...}``: the node of each task of ``plan`` on the
    allocation ``nodes`` (see the module doc); empty without nodes."""
    tasks = [la for la in plan.launches if la.role != BATCH_ROLE]
    if not nodes or not tasks:
        return {}
    placed: dict[str, str] = {}
    if plan.kind is JobKind.PS:
        for role in ("ps", "worker"):
            step = [la for la in tasks if la.role == role]
            width = min(len(step), len(nodes))  # the step's --nodes
            for la in step:
                placed[task_key(la)] = nodes[la.index % width]
        return placed
    per_node = max(1, -(-len(tasks) // len(nodes)))  # ddp: 1; mpi: --ntasks-per-node
    for la in tasks:
        placed[task_key(la)] = nodes[min(la.index // per_node, len(nodes) - 1)]
    return placed


def placed(plan: JobPlan) -> bool:
    """Whether the plan already names its tasks' nodes."""
    return any(log.node for la in plan.launches for log in la.log_paths)


def plan_on_nodes(plan: JobPlan, nodes: Sequence[str]) -> JobPlan:
    """The plan with each task's output file labelled with the node that writes it."""
    where = task_nodes(plan, nodes)
    launches = tuple(
        replace(la, log_paths=tuple(replace(log, node=where[task_key(la)]) for log in la.log_paths))
        if task_key(la) in where
        else la
        for la in plan.launches
    )
    return replace(plan, launches=launches)
