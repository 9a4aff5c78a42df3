"""What every planner needs before it writes argv: the chosen hosts, their slots, job
directories, addresses and the environment layers.

Environment precedence (later wins): the planner's defaults (PYTHONUNBUFFERED, thread
caps, NCCL/Gloo settings), the host's inventory ``env``, the user's ``--env``, then the
values the job cannot run without (``DISTCONSOLE_*``, ``MASTER_ADDR``, ``TF_CONFIG``, ...).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from console.errors import JobSpecError, PlanError
from console.inventory import Host, Inventory
from console.jobs import paths
from console.jobs.models import JobKind, Upload
from console.jobs.plan.netpresets import describe as describe_preset
from console.jobs.plan.netpresets import preset_env
from console.jobs.plan.rendezvous import rendezvous_host, rendezvous_name
from console.jobs.spec import JobSpec
from console.names import JOB_ID_VAR

DEFAULT_PORT_BASE = 29500
DEFAULT_PORT_SPAN = 1000
DEFAULT_PYTHON = "python3"
# Names the hang hook's folder in a process's environment; the wrapper prepends it to
# PYTHONPATH at run time (remote_ops.wrapper_script).
HANG_HOOK_VAR = "DISTCONSOLE_HANG_HOOK"
HANG_HOOK_RESOURCE = "hang_sitecustomize.py"  # in console.hostprogs.supervisor


@dataclass(frozen=True, slots=True)
class PlacedHost:
    """One chosen host with everything planners derive from it."""

    host: Host
    slots: int
    job_dir: str
    cwd: str
    address: str  # how the other hosts reach it
    interface: str | None

    @property
    def name(self) -> str:
        return self.host.name


@dataclass(frozen=True, slots=True)
class Placement:
    spec: JobSpec
    job_id: str
    hosts: tuple[PlacedHost, ...]
    master_port: int
    warnings: tuple[str, ...]
    notes: tuple[str, ...] = ()  # JobPlan.notes
    spares: tuple[PlacedHost, ...] = ()  # ddp --spare-hosts: wait to replace a lost host
    # --rendezvous-host: trains nothing, holds the rendezvous and the leader (issue 31).
    rendezvous: PlacedHost | None = None

    @property
    def first(self) -> PlacedHost:
        return self.hosts[0]

    @property
    def total_slots(self) -> int:
        return sum(h.slots for h in self.hosts)

    @property
    def job_dirs(self) -> dict[str, str]:
        rdzv = (self.rendezvous,) if self.rendezvous else ()
        return {h.name: h.job_dir for h in (*rdzv, *self.hosts, *self.spares)}


def reachable_address(host: Host) -> str:
    """The address other processes use to reach ``host`` (``local`` means this machine)."""
    return "127.0.0.1" if host.is_local else host.address


def is_loopback(address: str) -> bool:
    return address in ("local", "localhost", "::1") or address.startswith("127.")


def default_port(job_id: str) -> int:
    """A port in 29500..30499 that depends only on the job id (the runner may re-plan)."""
    digest = hashlib.sha256(job_id.encode()).digest()
    return DEFAULT_PORT_BASE + int.from_bytes(digest[:4], "big") % DEFAULT_PORT_SPAN


def select_hosts(spec: JobSpec, inventory: Inventory) -> tuple[Host, ...]:
    known = {h.name for h in inventory.hosts}
    unknown = [n for n in spec.hosts if n not in known]
    if unknown:
        raise JobSpecError(
            "hosts",
            f"no host named {', '.join(unknown)} in {inventory.path} "
            f"(hosts: {', '.join(h.name for h in inventory.hosts)})",
        )
    all_tags = set(inventory.tags)
    missing = [t for t in spec.tags if t not in all_tags]
    if missing:
        raise JobSpecError(
            "tags",
            f"no host has tag {', '.join(missing)} (tags: {', '.join(inventory.tags) or 'none'})",
        )
    chosen = inventory.select(spec.hosts or None, spec.tags or None)
    if not chosen:
        field = "tags" if spec.tags else "hosts"
        raise JobSpecError(field, "no host matches the selection")
    return chosen


def place(spec: JobSpec, inventory: Inventory, job_id: str) -> Placement:
    chosen = select_hosts(spec, inventory)
    rdzv_name = rendezvous_name(spec, chosen)
    if rdzv_name and not spec.hosts:  # all hosts (of the tags) but the rendezvous host
        chosen = tuple(h for h in chosen if h.name != rdzv_name)
        if not chosen:
            raise JobSpecError("rendezvous_host", f"{rdzv_name} is the only selected host")
    wanted = spare_names(spec, chosen)
    if wanted and not spec.hosts:  # all hosts (of the tags) but the spares
        chosen = tuple(h for h in chosen if h.name not in wanted)
        if not chosen:
            raise JobSpecError("spare_hosts", "every selected host is a spare")
    warnings: list[str] = []
    placed: list[PlacedHost] = []
    for host in chosen:
        placed.append(placed_host(spec, host, job_id, warnings))
    if len(placed) > 1 and is_loopback(placed[0].address):
        remote = [p.name for p in placed[1:] if not is_loopback(p.address)]
        if remote:
            warnings.append(
                f"the first host {placed[0].name} is reached at {placed[0].address}, which "
                f"{', '.join(remote)} cannot reach; put a host with a network address first"
            )
    notes = []
    if spec.net != "auto":  # not a problem: says in `plan` what the preset sets
        notes.append(describe_preset(spec.net, placed[0].interface, spec.ib_hca))
    port = spec.master_port if spec.master_port is not None else default_port(job_id)
    spares = tuple(
        placed_host(spec, host, job_id, warnings)
        for host in select_spares(spec, inventory, chosen, wanted)
    )
    rendezvous = None
    if rdzv_name:
        host = rendezvous_host(inventory, rdzv_name, chosen, (h.name for h in spares))
        rendezvous = placed_host(spec, host, job_id, warnings)
        remote = [p.name for p in placed if not is_loopback(p.address)]
        if is_loopback(rendezvous.address) and remote:
            warnings.append(
                f"the rendezvous host {rdzv_name} is reached at {rendezvous.address}, which "
                f"{', '.join(remote)} cannot reach; give it a network address"
            )
    return Placement(
        spec, job_id, tuple(placed), port, tuple(warnings), tuple(notes), spares, rendezvous
    )


def placed_host(spec: JobSpec, host: Host, job_id: str, warnings: list[str]) -> PlacedHost:
    if spec.gpus_per_host is not None:
        slots = spec.gpus_per_host
        if isinstance(host.gpus, int) and slots > host.gpus:
            warnings.append(
                f"{host.name}: {slots} slots requested but the inventory lists {host.gpus} GPUs"
            )
    else:
        slots = host.gpus if isinstance(host.gpus, int) and host.gpus > 0 else 1
    return PlacedHost(
        host=host,
        slots=slots,
        job_dir=paths.job_dir(host.work_dir, job_id),
        cwd=spec.workdir or host.work_dir,
        address=reachable_address(host),
        interface=spec.interface or host.interface,
    )


def spare_names(spec: JobSpec, chosen: tuple[Host, ...]) -> tuple[str, ...]:
    """--spare-hosts, else the leader host's ``spare_hosts`` (hosts.yaml; a default, so
    only for a ddp job with restarts and a --min-hosts floor, its own or the leader's,
    and never one of the hosts the job names)."""
    if spec.spare_hosts or spec.kind is not JobKind.DDP:
        return spec.spare_hosts
    leader = next((h for h in chosen if h.name not in h.spare_hosts), None)
    if leader is None or not leader.spare_hosts:
        return ()
    restarts = spec.max_restarts if spec.max_restarts is not None else leader.max_restarts
    floor = spec.min_hosts if spec.min_hosts is not None else leader.min_hosts
    if not restarts or not floor:
        return ()
    return tuple(n for n in leader.spare_hosts if n not in spec.hosts)


def select_spares(
    spec: JobSpec, inventory: Inventory, chosen: tuple[Host, ...], names: tuple[str, ...]
) -> tuple[Host, ...]:
    """The spares (``spare_names``): inventory hosts, none of them one of the job's
    (without --hosts the job's are the selected hosts but the spares)."""
    by_name = {h.name: h for h in inventory.hosts}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise JobSpecError("spare_hosts", f"no host named {', '.join(unknown)} in {inventory.path}")
    taken = [n for n in names if n in {h.name for h in chosen}]
    if taken:
        raise JobSpecError("spare_hosts", f"{', '.join(taken)} is already one of the job's hosts")
    return tuple(by_name[n] for n in names)


def step_split(total_steps: int | None, world_size: int) -> tuple[int | None, int | None]:
    """``(steps_per_rank, dropped)`` as Horovod's examples split: ``total // size``."""
    if total_steps is None:
        return None, None
    if total_steps < world_size:
        raise JobSpecError(
            "total_steps",
            f"{total_steps} steps cannot be shared by {world_size} ranks; "
            f"give at least {world_size}",
        )
    per_rank = total_steps // world_size
    return per_rank, total_steps - per_rank * world_size


def substitute(args: Iterable[str], values: Mapping[str, int | None]) -> tuple[str, ...]:
    """Replace ``{steps_per_rank}``, ``{total_steps}``, ``{world_size}``; other braces stay."""
    out = []
    for arg in args:
        for key, value in values.items():
            if value is not None:
                arg = arg.replace("{" + key + "}", str(value))
        out.append(arg)
    return tuple(out)


def program_argv(
    spec: JobSpec, python: str, job_dir: str, args: tuple[str, ...]
) -> tuple[str, ...]:
    """The program as a process to exec: ``python script.py ARGS`` or ``program ARGS``."""
    if spec.example is not None:
        return (python, paths.example_path(job_dir, spec.example), *args)
    if spec.program.endswith(".py"):
        return (python, spec.program, *args)
    return (spec.program, *args)


def example_uploads(spec: JobSpec, targets: Iterable[tuple[str, str]]) -> tuple[Upload, ...]:
    """Uploads of the example program: ``targets`` are (host name, job dir) pairs."""
    if spec.example is None:
        return ()
    resource = paths.example_resource(spec.example)
    return tuple(
        Upload(host=name, path=paths.example_path(jdir, spec.example), resource=resource)
        for name, jdir in targets
    )


def job_env(
    placed: PlacedHost,
    spec: JobSpec,
    *,
    defaults: Mapping[str, str],
    fixed: Mapping[str, str],
) -> dict[str, str]:
    """The four environment layers merged, defaults first (see module docstring)."""
    # Launchers (torchrun --tee, horovodrun) and most trainers are Python writing to a
    # log file: block-buffered, a live log would trail training by minutes.
    env: dict[str, str] = {"PYTHONUNBUFFERED": "1", **defaults}
    env.update(preset_env(spec.net, placed.interface, spec.ib_hca))  # netpresets.py
    env.update(placed.host.env)
    env.update(spec.env)
    env.update(fixed)
    if spec.hang_timeout is not None:
        # The wrapper puts this folder first on PYTHONPATH (keeping the user's), so
        # every Python of the job loads the hang hook (hostprogs/supervisor/hang_sitecustomize.py).
        env[HANG_HOOK_VAR] = paths.hang_hook_dir(placed.job_dir)
    return env


def hang_hook_uploads(job_dirs: Mapping[str, str], hosts: Iterable[str]) -> tuple[Upload, ...]:
    """The job's sitecustomize (faulthandler on a signal) for each host that starts a
    process: ``<job dir>/python/sitecustomize.py``."""
    return tuple(
        Upload(
            host=name,
            path=f"{paths.hang_hook_dir(job_dirs[name])}/sitecustomize.py",
            resource=HANG_HOOK_RESOURCE,
            package="console.hostprogs.supervisor",
        )
        for name in dict.fromkeys(hosts)
    )


def distconsole_env(
    job_id: str,
    job_dir: str,
    world_size: int,
    total_steps: int | None,
    steps_per_rank: int | None,
) -> dict[str, str]:
    env = {
        JOB_ID_VAR: job_id,
        JOB_DIR_VAR: job_dir,
        "DISTCONSOLE_WORLD_SIZE": str(world_size),
    }
    if total_steps is not None and steps_per_rank is not None:
        env["DISTCONSOLE_TOTAL_STEPS"] = str(total_steps)
        env["DISTCONSOLE_STEPS_PER_RANK"] = str(steps_per_rank)
    return env


CHECKPOINT_VAR = "DISTCONSOLE_CHECKPOINT_DIR"
RESTART_VAR = "DISTCONSOLE_RESTART_COUNT"  # set by the wrapper (0) and on each restart
JOB_DIR_VAR = "DISTCONSOLE_JOB_DIR"
FLIGHT_RECORDER_VAR = "TORCH_FR_DUMP_TEMP_FILE"
# Paths on the host that the job itself opens: the shell that starts a process expands
# their ~/ against that host's HOME (Python, PyTorch and os.path.isdir take "~"
# literally), and an MPI rank exports its own host's (a launcher forwards its own).
HOME_PATH_VARS = frozenset({JOB_DIR_VAR, HANG_HOOK_VAR, FLIGHT_RECORDER_VAR, CHECKPOINT_VAR})


def max_restarts(p: Placement) -> int:
    """--max-restarts, else the leader host's ``max_restarts`` (hosts.yaml), else 0."""
    if p.spec.max_restarts is not None:
        return p.spec.max_restarts
    return p.first.host.max_restarts or 0


def min_hosts(p: Placement, restarts: int) -> int:
    """ddp's elastic floor (0: not elastic): --min-hosts, else the leader host's
    ``min_hosts`` (hosts.yaml; a default, so only for a job with restarts), checked
    against the job's hosts. A scale-down is a torchrun restart of the survivors, so an
    explicit --min-hosts needs --max-restarts of at least 1."""
    wanted = p.spec.min_hosts
    if wanted is None:
        wanted = p.first.host.min_hosts if restarts else None
        if wanted is not None:
            wanted = min(wanted, len(p.hosts))  # a default never exceeds the job
    if wanted is None:
        return 0
    if not restarts:
        raise PlanError(
            f"--min-hosts {wanted} needs --max-restarts N of at least 1: torchrun takes a "
            "lost host as a restart of the survivors (each scale-down uses one)"
        )
    if not 1 <= wanted <= len(p.hosts):
        raise PlanError(
            f"--min-hosts {wanted} must be 1..{len(p.hosts)}, the job's number of hosts"
        )
    return wanted


FIRST_HOST_LOSS = "Losing {host} ends the job:"  # first_host_note's opening


def first_host_note(p: Placement, holds: str) -> str:
    """An elastic job survives a lost host unless it is the first (issue 31): the plan
    says so in one line, and a failure for that host's loss repeats it (first_host_said).
    The ways round: the host order, or --rendezvous-host (rendezvous.py)."""
    first = p.first.name
    return (
        f"{FIRST_HOST_LOSS.format(host=first)} it holds {holds} and the job's leader "
        f"supervisor (any other host may be lost); name your steadiest host first "
        f"(--hosts, the form's Hosts), or give the job a rendezvous host that trains "
        f"nothing (--rendezvous-host HOST) so that any host may be lost"
    )


def first_host_said(notes: Iterable[object], host: str) -> str | None:
    """The plan's first_host_note when ``host`` is the one it names (a job.json read back
    gives the notes as JSON: anything that is not a string is skipped)."""
    opening = FIRST_HOST_LOSS.format(host=host)
    return next((n for n in notes if isinstance(n, str) and n.startswith(opening)), None)


def checkpoint_env(spec: JobSpec, job_dir: str) -> dict[str, str]:
    """Where the process checkpoints: --checkpoint-dir, else checkpoints/ in its job
    directory on its host (kept across restarts; the wrapper creates it)."""
    return {CHECKPOINT_VAR: spec.checkpoint_dir or paths.checkpoint_dir(job_dir)}


def check_port_range(base: int, count: int) -> None:
    if base + count - 1 > 65535:
        raise PlanError(
            f"ports {base}..{base + count - 1} run past 65535; choose a lower --master-port"
        )
