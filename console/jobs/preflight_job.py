"""Pre-flight for one planned job: what each of its hosts must offer, from the spec and
the plan (the checks themselves are console/jobs/preflight.py's).

Both launch paths call :func:`preflight_job`: ``distconsole launch`` and the console's
launch form, so a job is judged the same way whichever started it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from console.errors import JobSpecError
from console.inventory import Inventory
from console.jobs.models import JobKind, JobPlan, RankLaunch
from console.jobs.placement import place
from console.jobs.preflight import HostRequest, PreflightReport, run_preflight
from console.jobs.spec import JobSpec

REQUIRED = {JobKind.DDP: ("torch",), JobKind.HOROVOD: ("horovod",)}
# Open MPI's own two switches that let mpirun run as root (either suffices with the flag).
ROOT_ALLOWED_ENV = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")


async def preflight_job(
    connections: Any, spec: JobSpec, plan: JobPlan, inventory: Inventory
) -> PreflightReport:
    """Probe every host of ``plan`` (all at once) and judge what it found."""
    if not plan.launches:
        raise JobSpecError("hosts", "the plan starts no process")
    slots = {ph.name: ph.slots for ph in place(spec, inventory, plan.job_id).hosts}
    packages = ["torch"] + (["horovod"] if plan.kind is JobKind.HOROVOD else [])
    program = None if spec.example is not None else spec.program
    uses_mpirun = plan.kind is JobKind.MPI or (
        plan.kind is JobKind.HOROVOD and spec.horovod_launcher == "mpi"
    )
    return await run_preflight(
        connections,
        plan_requests(
            plan,
            inventory,
            slots,
            spec.interface,
            program=program,
            uses_mpirun=uses_mpirun,
        ),
        packages=packages,
        required=REQUIRED.get(plan.kind, ()),
    )


def plan_requests(
    plan: JobPlan,
    inventory: Inventory,
    slots: Mapping[str, int],
    interface: str | None,
    *,
    program: str | None = None,
    uses_mpirun: bool = False,
) -> list[HostRequest]:
    """What each host of ``plan`` must offer; ``slots`` are ranks per host (GPUs);
    ``program`` is the user's own program (None for a bundled example)."""
    master = plan.launches[0].host if plan.launches else None
    hosts = list(dict.fromkeys([*(ln.host for ln in plan.launches), *plan.hosts_involved]))
    # mpirun/horovodrun start every rank in the launcher's working directory.
    launcher_cwd = plan.launches[0].cwd if plan.launches else ""
    requests = []
    for name in hosts:
        host = inventory.get(name)
        own = [ln for ln in plan.launches if ln.host == name]
        programs = list(dict.fromkeys(ln.argv[0] for ln in own if ln.argv))
        cwds = tuple(dict.fromkeys(ln.cwd for ln in own)) or (launcher_cwd,)
        files: tuple[tuple[str, str], ...] = ()
        if program is not None:
            if _is_path(program):
                files = tuple((cwd, program) for cwd in cwds)
            elif program not in programs:
                programs.append(program)
        gpus = 0 if plan.kind is JobKind.PS else slots.get(name, 0)
        requests.append(
            HostRequest(
                host=host,
                port=plan.master_port if name == master and plan.kind is JobKind.DDP else None,
                interface=interface or host.interface,
                programs=tuple(programs),
                gpus=gpus,
                files=files,
                # The start creates the job directory, and so the work directory above it.
                dirs=tuple(d for d in cwds if not _created_by_start(d, plan.job_dirs.get(name))),
                mpi_launcher=uses_mpirun and name == master and not _root_allowed(own),
            )
        )
    return requests


def _created_by_start(directory: str, job_dir: str | None) -> bool:
    return job_dir is not None and job_dir.startswith(directory.rstrip("/") + "/")


def _is_path(program: str) -> bool:
    """A script or a program given by path (checked as a file), not a name on PATH."""
    return program.endswith(".py") or "/" in program


def _root_allowed(launches: list[RankLaunch]) -> bool:
    for launch in launches:
        if "--allow-run-as-root" in launch.argv:
            return True
        if all(launch.env.get(var) == "1" for var in ROOT_ALLOWED_ENV):
            return True
    return False
