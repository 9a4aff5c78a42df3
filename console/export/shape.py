"""What every exporter needs from a spec and an inventory: the job's shape.

A Kubernetes job or a Slurm allocation is homogeneous: N nodes (pods) with G GPUs each.
:func:`job_shape` derives that from the same placement the planners use (host
selection, ``--gpus-per-host`` or each host's ``gpus``), splits the step budget the way
the planners do, and collects the environment the planners would give every process.
What the inventory says about SSH machines (addresses, ports, users, work_dir, the
hosts' own ``env``) does not reach an export: a scheduler picks the machines.
"""

from __future__ import annotations

from dataclasses import dataclass

from console.errors import JobSpecError
from console.inventory import Inventory
from console.jobs.models import JobKind
from console.jobs.plan.mpi import THREAD_CAPS
from console.jobs.plan.placement import Placement, place, step_split, substitute
from console.jobs.plan.ps import DEFAULT_PS_TASKS
from console.jobs.spec import JobSpec, spec_with

# torchrun's own default rendezvous port, used when the spec names none (the console's
# per-job port comes from its job id, which an exported job does not have).
DEFAULT_MASTER_PORT = 29500
EXAMPLE_MODULE = "console.examples.{name}_train"
_PLACEMENT_ID = "export"


@dataclass(frozen=True, slots=True)
class JobShape:
    """One job as a scheduler sees it: homogeneous nodes, one program, one environment."""

    spec: JobSpec
    nodes: int  # hosts chosen by --hosts/--tag (all by default)
    gpus_per_node: int  # slots on every node (one number: replicas are alike)
    world_size: int  # ddp/mpi/horovod: nodes x gpus; ps: workers
    args: tuple[str, ...]  # the program's arguments with {placeholders} replaced
    master_port: int
    interface: str | None  # --interface, else the hosts' common `interface` (sbatch only)
    python: str  # the first host's interpreter (sbatch only)
    steps_per_rank: int | None
    ps_tasks: int  # ps kind only (0 otherwise)
    workers: int  # ps kind only (0 otherwise)
    warnings: tuple[str, ...]

    @property
    def kind(self) -> JobKind:
        return self.spec.kind

    @property
    def example_module(self) -> str | None:
        """``console.examples.ddp_train`` for ``example:ddp``; None for a user program."""
        if self.spec.example is None:
            return None
        return EXAMPLE_MODULE.format(name=self.spec.example)

    def env(self, interface: str | None) -> dict[str, str]:
        """The environment every process gets: the planner's defaults for this kind
        (PYTHONUNBUFFERED, thread caps, NCCL/Gloo NIC from ``interface``), then the
        user's ``--env``, then the world size and step budget the examples read."""
        spec = self.spec
        env: dict[str, str] = {"PYTHONUNBUFFERED": "1"}
        if spec.kind is JobKind.DDP:
            env.update({"OMP_NUM_THREADS": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"})
            if interface:
                env.update({"NCCL_SOCKET_IFNAME": interface, "GLOO_SOCKET_IFNAME": interface})
        else:
            env.update(dict.fromkeys(THREAD_CAPS, "1"))
            if interface:
                env["NCCL_SOCKET_IFNAME"] = interface
        env.update(spec.env)
        env["DISTCONSOLE_WORLD_SIZE"] = str(self.world_size)
        if spec.total_steps is not None and self.steps_per_rank is not None:
            env["DISTCONSOLE_TOTAL_STEPS"] = str(spec.total_steps)
            env["DISTCONSOLE_STEPS_PER_RANK"] = str(self.steps_per_rank)
        return env


def _common_interface(p: Placement) -> str | None:
    found = {h.interface for h in p.hosts}
    return found.pop() if len(found) == 1 else None


def job_shape(spec: JobSpec, inventory: Inventory, *, nodes: int | None = None) -> JobShape:
    """The shape of ``spec`` on ``inventory``; a JobSpecError names the spec field
    (``gpus_per_host`` when the chosen hosts differ in GPUs, ``total_steps`` when the
    budget cannot be shared).

    ``nodes``: a scheduler's node count (``launch --scheduler slurm --nodes N``); the
    spec's hosts then only lend their Python and interface, and the GPUs per node are
    ``--gpus-per-host`` (default 1)."""
    if spec.kind is JobKind.RAY:
        # A Ray cluster is its own scheduler: KubeRay's RayJob, or `ray start` in an
        # allocation, are not written from this spec yet.
        raise JobSpecError(
            "kind",
            "a ray job is not exported (no Kubeflow or sbatch form of it yet); "
            "run it over SSH: distconsole launch HOSTS --kind ray -- DRIVER",
        )
    if nodes is not None:
        return _scheduled_shape(spec, inventory, nodes)
    p = place(spec, inventory, _PLACEMENT_ID)
    # Not p.warnings: they are about SSH addresses, which an export does not use.
    warnings = [
        f"{h.name}: {h.slots} GPUs per node requested but the inventory lists {h.host.gpus}"
        for h in p.hosts
        if isinstance(h.host.gpus, int) and h.slots > h.host.gpus
    ]
    slots = {h.slots for h in p.hosts}
    if len(slots) > 1:
        counts = ", ".join(f"{h.name} {h.slots}" for h in p.hosts)
        raise JobSpecError(
            "gpus_per_host",
            f"the chosen hosts have different GPU counts ({counts}); the nodes of an "
            "exported job are alike: give one number of GPUs per node",
        )
    gpus = slots.pop()
    if spec.gpus_per_host is None:
        unknown = [h.name for h in p.hosts if not isinstance(h.host.gpus, int)]
        if unknown:
            warnings.append(
                f"{', '.join(unknown)}: gpus is 'auto' in the inventory; exported with "
                f"{gpus} GPU per node (give --gpus-per-host)"
            )
    return _shape(spec, p, len(p.hosts), gpus, tuple(warnings))


def _scheduled_shape(spec: JobSpec, inventory: Inventory, nodes: int) -> JobShape:
    if nodes < 1:
        raise JobSpecError("nodes", f"must be at least 1, got {nodes}")
    p = place(spec_with(spec, gpus_per_host=1), inventory, _PLACEMENT_ID)
    gpus = spec.gpus_per_host if spec.gpus_per_host is not None else 1
    return _shape(spec, p, nodes, gpus, ())


def _shape(
    spec: JobSpec, p: Placement, nodes: int, gpus: int, warnings: tuple[str, ...]
) -> JobShape:
    extra: list[str] = list(warnings)
    ps_tasks = workers = 0
    if spec.kind is JobKind.PS:
        ps_tasks = spec.ps if spec.ps is not None else DEFAULT_PS_TASKS
        workers = spec.workers if spec.workers is not None else nodes
        world_size = workers
    else:
        world_size = nodes * gpus
    steps_per_rank, _dropped = step_split(spec.total_steps, world_size)
    args = substitute(
        spec.args,
        {
            "steps_per_rank": steps_per_rank,
            "total_steps": spec.total_steps,
            "world_size": world_size,
        },
    )
    if spec.max_restarts and spec.kind is not JobKind.DDP:
        extra.append(
            f"--max-restarts under a scheduler: a {spec.kind.value} job is requeued "
            "(sbatch --requeue: a node failure, a preemption) but a failed rank is not run "
            "again (only ddp's torchrun restarts its workers there); Kubeflow: not at all"
        )
    if spec.min_hosts is not None:
        extra.append(
            "--min-hosts is not applied under a scheduler: the allocation's nodes are fixed "
            "(torchrun runs --nnodes N; a lost node fails the job, which --requeue runs again)"
        )
    if spec.kind is JobKind.HOROVOD and spec.horovod_launcher == "gloo":
        extra.append(
            "horovod ranks start under MPI in an exported job (the scheduler's MPI "
            "launcher, not horovodrun --gloo): the image or nodes need horovod built "
            "with MPI support"
        )
    return JobShape(
        spec=spec,
        nodes=nodes,
        gpus_per_node=gpus,
        world_size=world_size,
        args=args,
        master_port=spec.master_port if spec.master_port is not None else DEFAULT_MASTER_PORT,
        interface=spec.interface or _common_interface(p),
        python=p.first.host.python,
        steps_per_rank=steps_per_rank,
        ps_tasks=ps_tasks,
        workers=workers,
        warnings=tuple(extra),
    )
