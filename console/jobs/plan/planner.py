"""``plan(spec, inventory)`` -> :class:`JobPlan`: pure, no network.

The master port is the spec's, else a default derived from the job id; the runner
checks it is free at launch and may call :func:`plan` again with another
(``spec_with(spec, master_port=...)`` and the same ``job_id``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from console.errors import JobSpecError, PlanError
from console.inventory import Inventory
from console.jobs import paths
from console.jobs.models import JobKind, JobPlan
from console.jobs.notify import plan_notify
from console.jobs.plan.ddp import plan_ddp
from console.jobs.plan.mpi import plan_mpi
from console.jobs.plan.placement import Placement, hang_hook_uploads, place
from console.jobs.plan.ps import plan_ps
from console.jobs.plan.ray import plan_ray
from console.jobs.plan.rendezvous import ROLE as RENDEZVOUS_ROLE
from console.jobs.spec import JobSpec
from console.names import valid_job_id

PLANNERS: dict[JobKind, Callable[[Placement], JobPlan]] = {
    JobKind.DDP: plan_ddp,
    JobKind.MPI: plan_mpi,
    JobKind.HOROVOD: plan_mpi,
    JobKind.PS: plan_ps,
    JobKind.RAY: plan_ray,
}


def plan(spec: JobSpec, inventory: Inventory, *, job_id: str | None = None) -> JobPlan:
    """Every process of the job: host, role, argv, env, cwd and log files.

    Raises JobSpecError (naming the field) for selections or step budgets that do not
    fit this inventory, PlanError for combinations the launchers cannot express.
    """
    if job_id is None:
        job_id = paths.new_job_id(spec.display_name)
    elif not valid_job_id(job_id):
        raise JobSpecError("job_id", f"{job_id!r} is not a job id")
    placement = place(spec, inventory, job_id)
    planned = PLANNERS[spec.kind](placement)
    if placement.rendezvous is not None and planned.rendezvous_host is None:
        raise PlanError(
            f"--rendezvous-host {placement.rendezvous.name}: not built for this kind yet "
            "(ddp and Horovod elastic only)"
        )
    if placement.notes:
        planned = dataclasses.replace(planned, notes=planned.notes + placement.notes)
    names = {h.name: h for h in inventory.hosts}
    leader = names.get(planned.launches[0].host) if planned.launches else None
    notify = plan_notify(spec.notify, spec.notify_command, spec.notify_on, leader)
    if notify is not None:
        planned = dataclasses.replace(planned, notify=notify)
    # --slow-threshold, else the leader host's slow_threshold (hosts.yaml), else 1.3.
    threshold = spec.slow_threshold
    if threshold is None and leader is not None:
        threshold = leader.slow_threshold
    if threshold is not None:
        planned = dataclasses.replace(planned, slow_threshold=threshold)
    if spec.exclude_slow is not None:
        if planned.kind is not JobKind.DDP or not planned.min_hosts:
            raise PlanError(
                "--exclude-slow drains a slow host from an elastic ddp job: it needs "
                "--kind ddp with --min-hosts (or the leader host's min_hosts)"
            )
        planned = dataclasses.replace(planned, exclude_slow=spec.exclude_slow)
    if spec.hang_timeout is None:
        return planned
    # Every host of the job: an MPI rank on a host without a process of its own loads
    # the hook from its own host's job directory too.
    involved = (h for h in planned.hosts_involved if h in planned.job_dirs)
    # Not the rendezvous host's store: no Python of the job's own runs there.
    started = (x.host for x in planned.launches if x.role != RENDEZVOUS_ROLE)
    hosts = (*started, *involved)
    hook = hang_hook_uploads(planned.job_dirs, hosts)
    return dataclasses.replace(
        planned,
        uploads=planned.uploads + hook,
        hang_timeout=spec.hang_timeout,
        stop_on_hang=spec.stop_on_hang,
    )
