"""Parameter-server jobs: one process per task, each told the whole cluster by TF_CONFIG.

Tasks are ``ps`` 0..P-1, then the optional ``chief``, then ``worker`` 0..W-1, placed
round-robin over the chosen hosts in that order; task ``k`` listens on ``base + k``
(``base`` = the master port), so two tasks on one host never collide. The step budget
is split over the workers. The runner stops the ps tasks once every worker (and the
chief) has exited 0: a ps task serves until it is told to stop.
"""

from __future__ import annotations

import json

from console.jobs import paths
from console.jobs.models import JobKind, JobPlan, LogFile, RankLaunch
from console.jobs.plan.mpi import THREAD_CAPS
from console.jobs.plan.placement import (
    PlacedHost,
    Placement,
    check_port_range,
    checkpoint_env,
    distconsole_env,
    example_uploads,
    job_env,
    max_restarts,
    program_argv,
    step_split,
    substitute,
)

DEFAULT_PS_TASKS = 1


def tasks(p: Placement) -> list[tuple[str, int, PlacedHost, int]]:
    """``(type, index, host, port)`` for every task, in placement order."""
    spec = p.spec
    n_ps = spec.ps if spec.ps is not None else DEFAULT_PS_TASKS
    n_workers = spec.workers if spec.workers is not None else len(p.hosts)
    order = [("ps", i) for i in range(n_ps)]
    if spec.chief:
        order.append(("chief", 0))
    order += [("worker", i) for i in range(n_workers)]
    check_port_range(p.master_port, len(order))
    return [
        (kind, index, p.hosts[k % len(p.hosts)], p.master_port + k)
        for k, (kind, index) in enumerate(order)
    ]


def cluster_spec(placed: list[tuple[str, int, PlacedHost, int]]) -> dict[str, list[str]]:
    cluster: dict[str, list[str]] = {"ps": [], "worker": []}
    for kind, _index, host, port in placed:
        cluster.setdefault(kind, []).append(f"{host.address}:{port}")
    return cluster


def tf_config(cluster: dict[str, list[str]], kind: str, index: int) -> str:
    return json.dumps(
        {"cluster": cluster, "task": {"type": kind, "index": index}}, separators=(",", ":")
    )


def plan_ps(p: Placement) -> JobPlan:
    spec = p.spec
    placed = tasks(p)
    n_workers = sum(1 for kind, *_ in placed if kind == "worker")
    spr, dropped = step_split(spec.total_steps, n_workers)
    args = substitute(
        spec.args,
        {"steps_per_rank": spr, "total_steps": spec.total_steps, "world_size": n_workers},
    )
    cluster = cluster_spec(placed)
    launches: list[RankLaunch] = []
    for kind, index, ph, _port in placed:
        fixed = {
            **distconsole_env(p.job_id, ph.job_dir, n_workers, spec.total_steps, spr),
            "DISTCONSOLE_TASK_TYPE": kind,
            "DISTCONSOLE_TASK_INDEX": str(index),
            "TF_CONFIG": tf_config(cluster, kind, index),
            **checkpoint_env(spec, ph.job_dir),
        }
        logs = (
            LogFile(paths.process_stdout(ph.job_dir, kind, index), "stdout", kind, index=index),
            LogFile(paths.process_stderr(ph.job_dir, kind, index), "stderr", kind, index=index),
        )
        launches.append(
            RankLaunch(
                host=ph.name,
                role=kind,
                index=index,
                argv=program_argv(spec, ph.host.python, ph.job_dir, args),
                env=job_env(ph, spec, defaults=dict.fromkeys(THREAD_CAPS, "1"), fixed=fixed),
                cwd=ph.cwd,
                log_paths=logs,
            )
        )
    involved = [h for h in p.hosts if any(t[2] is h for t in placed)]
    warnings = list(p.warnings)
    if len(involved) < len(p.hosts):
        idle = [h.name for h in p.hosts if h not in involved]
        warnings.append(f"{', '.join(idle)} get no task ({len(placed)} tasks)")
    return JobPlan(
        job_id=p.job_id,
        name=spec.display_name,
        kind=JobKind.PS,
        world_size=len(placed),
        launches=tuple(launches),
        job_dirs={h.name: h.job_dir for h in involved},
        master_addr=p.first.address,
        master_port=p.master_port,
        total_steps=spec.total_steps,
        steps_per_rank=spr,
        steps_dropped=dropped,
        hosts_involved=tuple(h.name for h in involved),
        warnings=tuple(warnings),
        uploads=example_uploads(spec, ((h.name, h.job_dir) for h in involved)),
        fail_fast=spec.fail_fast,
        max_restarts=max_restarts(p),
    )
