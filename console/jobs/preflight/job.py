"""Pre-flight for one planned job: what each of its hosts must offer, from the spec and
the plan (the checks themselves are console/jobs/preflight/probe.py's).

Both launch paths call :func:`preflight_job`: ``distconsole launch`` and the console's
launch form, so a job is judged the same way whichever started it.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from console.errors import JobSpecError
from console.inventory import Inventory
from console.jobs.models import JobKind, JobPlan, RankLaunch
from console.jobs.plan.mpi_ranks import ssh_name
from console.jobs.plan.placement import Placement, place
from console.jobs.plan.ports import ListenPort, listen_ports
from console.jobs.plan.rendezvous import ROLE as RENDEZVOUS_ROLE
from console.jobs.preflight.checks import Finding
from console.jobs.preflight.health_gate import HealthCheck, judge_health
from console.jobs.preflight.probe import HostRequest, PreflightReport, run_preflight
from console.jobs.spec import JobSpec

REQUIRED = {JobKind.DDP: ("torch",), JobKind.HOROVOD: ("horovod",), JobKind.RAY: ("ray",)}
# What each bundled example imports beyond the standard library (console/examples/), so
# that `--kind mpi -- example:horovod` without horovod is refused here, not by every rank.
EXAMPLE_NEEDS: dict[str, tuple[str, ...]] = {
    "ddp": ("torch",),
    "horovod": ("horovod", "torch"),
    "mpi": (),
    "ps": (),
    "ray": ("ray",),
}
# Open MPI's own two switches that let mpirun run as root (either suffices with the flag).
ROOT_ALLOWED_ENV = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")


async def preflight_job(
    connections: Any,
    spec: JobSpec,
    plan: JobPlan,
    inventory: Inventory,
    *,
    health: HealthCheck | None = None,
    allow_unhealthy: bool = False,
) -> PreflightReport:
    """Probe every host of ``plan`` (all at once) and judge what it found; ``health``
    reads the GPUs' verdicts meanwhile (a failing GPU of the job's is an error unless
    ``allow_unhealthy``)."""
    if not plan.launches:
        raise JobSpecError("hosts", "the plan starts no process")
    placement = place(spec, inventory, plan.job_id)
    slots = {ph.name: ph.slots for ph in placement.hosts}
    packages = ["torch"] + (["horovod"] if plan.kind is JobKind.HOROVOD else [])
    if plan.kind is JobKind.RAY:
        packages = ["ray"]  # every node must run the same Ray (and the driver's)
        if spec.gpus_per_host is None:  # Ray counts the GPUs itself; none is needed
            slots = dict.fromkeys(slots, 0)
    program = None if spec.example is not None else spec.program
    uses_mpirun = plan.kind is JobKind.MPI or (
        plan.kind is JobKind.HOROVOD and spec.horovod_launcher == "mpi"
    )
    requests = plan_requests(
        plan,
        inventory,
        slots,
        spec.interface,
        program=program,
        uses_mpirun=uses_mpirun,
        rank_cwds={ph.name: ph.cwd for ph in placement.hosts},
        ssh_peers=launcher_peers(placement),
        keys_hint=keys_hint(inventory, placement),
        ports=listen_ports(placement),
    )
    required = required_packages(plan.kind, spec.example)
    packages += [p for p in required if p not in packages]
    checks = run_preflight(connections, requests, packages=packages, required=required)
    if health is None:
        return await checks
    names = [r.host.name for r in requests if r.gpus and connections[r.host.name].status.is_up]
    report, rows = await asyncio.gather(checks, health(names), return_exceptions=True)
    if isinstance(report, BaseException):
        raise report
    if isinstance(rows, BaseException):
        if not isinstance(rows, Exception):
            raise rows
        found = [Finding("health", "warning", f"GPU health not read: {rows}")]
    else:
        found = judge_health(requests, rows, allow=allow_unhealthy)
        # The sampler's reading of the GPUs' processes replaces the probe's nvidia-smi
        # one: it sees the demo's simulated GPUs too, and only the job's GPUs count.
        kept = tuple(f for f in report.findings if f.check != "gpu-busy")
        report = replace(report, findings=kept)
    return replace(report, findings=(*report.findings, *found), checked=(*report.checked, "health"))


def required_packages(kind: JobKind, example: str | None) -> tuple[str, ...]:
    """The packages every host of the job must have: its kind's launcher's, its example's."""
    needs = (*REQUIRED.get(kind, ()), *EXAMPLE_NEEDS.get(example or "", ()))
    return tuple(dict.fromkeys(needs))


def launcher_peers(p: Placement) -> tuple[str, ...]:
    """What an MPI/Horovod launcher ssh's to (its -H names), itself included: it does
    not take its own 127.0.0.x address or inventory name for local. 127.0.0.1 and
    ``local`` it does, and a one-host job needs no ssh."""
    if p.spec.kind not in (JobKind.MPI, JobKind.HOROVOD) or len(p.hosts) < 2:
        return ()
    names = (ssh_name(p, h) for h in p.hosts)
    return tuple(n for n in names if n not in ("127.0.0.1", "localhost", "local"))


def keys_hint(inventory: Inventory, p: Placement) -> str:
    """The command that lets the job's hosts ssh to each other (issue 10's ``keys``)."""
    names = ",".join(h.name for h in p.hosts)
    return f"distconsole keys {shlex.quote(str(inventory.path))} --host {names}"


def plan_requests(
    plan: JobPlan,
    inventory: Inventory,
    slots: Mapping[str, int],
    interface: str | None,
    *,
    program: str | None = None,
    uses_mpirun: bool = False,
    rank_cwds: Mapping[str, str] | None = None,
    ssh_peers: Sequence[str] = (),
    keys_hint: str = "distconsole keys HOSTS",
    ports: Mapping[str, tuple[ListenPort, ...]] | None = None,
) -> list[HostRequest]:
    """What each host of ``plan`` must offer; ``slots`` are ranks per host (GPUs);
    ``program`` is the user's own program (None for a bundled example); ``rank_cwds``
    the working directory of the ranks an MPI launcher starts on each host;
    ``ssh_peers`` what the launcher (the first process's host) must reach by ssh;
    ``ports`` what each host's processes listen on (``plan.ports.listen_ports``)."""
    master = plan.launches[0].host if plan.launches else None
    ports = ports or {}
    hosts = list(dict.fromkeys([*(ln.host for ln in plan.launches), *plan.hosts_involved]))
    # mpirun/horovodrun ranks enter their own host's working directory (mpi_ranks.py).
    launcher_cwd = plan.launches[0].cwd if plan.launches else ""
    rank_cwds = rank_cwds or {}
    requests = []
    for name in hosts:
        host = inventory.get(name)
        own = [ln for ln in plan.launches if ln.host == name]
        programs = list(dict.fromkeys(ln.argv[0] for ln in own if ln.argv))
        cwds = tuple(dict.fromkeys(ln.cwd for ln in own)) or (rank_cwds.get(name, launcher_cwd),)
        files: tuple[tuple[str, str], ...] = ()
        # A rendezvous host (--rendezvous-host) runs only our store: not the program.
        store_only = bool(own) and all(ln.role == RENDEZVOUS_ROLE for ln in own)
        if program is not None and not store_only:
            if _is_path(program):
                files = tuple((cwd, program) for cwd in cwds)
            elif program not in programs:
                programs.append(program)
        gpus = 0 if plan.kind is JobKind.PS else slots.get(name, 0)
        requests.append(
            HostRequest(
                host=host,
                ports=ports.get(name, ()),
                interface=interface or host.interface,
                programs=tuple(programs),
                gpus=gpus,
                files=files,
                # The start creates the job directory, and so the work directory above it.
                dirs=tuple(d for d in cwds if not _created_by_start(d, plan.job_dirs.get(name))),
                mpi_launcher=uses_mpirun and name == master and not _root_allowed(own),
                ssh_peers=tuple(ssh_peers) if name == master else (),
                keys_hint=keys_hint,
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
