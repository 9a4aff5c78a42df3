"""Pre-flight's verdict: what a host must offer for a job (:class:`HostRequest`), and
the pure judgement of one probe's answers against it (:func:`judge_host`) and of all
hosts' versions together (:func:`compare_versions`), as :class:`Finding` s that say
what is wrong and what to do. :mod:`console.jobs.preflight.probe` runs the probes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from console.inventory import Host
from console.jobs.plan.ports import ListenPort
from console.jobs.preflight.probe_report import HostProbe

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Finding:
    # "host", "port", "interface", "ssh", "program", "workdir", "mpi-root", "gpus",
    # "gpu-busy", "versions"
    check: str
    severity: Severity
    message: str  # says what is wrong and what to do
    host: str | None = None

    def line(self) -> str:
        tag = "FAIL" if self.severity == "error" else "WARN"
        where = f"{self.host}: " if self.host else ""
        return f"{tag} [{self.check}] {where}{self.message}"


@dataclass(frozen=True, slots=True)
class HostRequest:
    """What one host must offer for the job."""

    host: Host
    # Must be free: every port the job's processes listen on there (jobs/plan/ports.py).
    ports: tuple[ListenPort, ...] = ()
    interface: str | None = None
    programs: tuple[str, ...] = ()
    gpus: int = 0  # GPUs (slots) the job puts there; 0: not checked
    # (working directory, program path) pairs that must be files there (the job's own
    # program: a script or an executable given with a path)
    files: tuple[tuple[str, str], ...] = ()
    dirs: tuple[str, ...] = ()  # working directories that must exist
    mpi_launcher: bool = False  # mpirun starts here: it refuses root unless allowed
    # The launcher host ssh's to each of these (mpirun/horovodrun -H names), BatchMode,
    # host keys verified; ``keys_hint`` is the command that sets that up.
    ssh_peers: tuple[str, ...] = ()
    keys_hint: str = "distconsole keys HOSTS"


def judge_host(req: HostRequest, probe: HostProbe, required: Sequence[str]) -> list[Finding]:
    name = req.host.name
    found: list[Finding] = []
    for wanted in req.ports:
        taken = probe.ports.get(wanted.port)
        if taken:  # "" is free; a port the probe did not report is not judged
            found.append(
                Finding(
                    "port",
                    "error",
                    f"{wanted.what} {wanted.port} is in use ({taken}); {wanted.hint}",
                    name,
                )
            )
    found += _judge_interface(req, probe)
    found += _judge_ssh(req, probe)
    for program, path in probe.programs.items():
        if path is None:
            found.append(
                Finding(
                    "program",
                    "error",
                    f"{program} not found on PATH after the host's setup line "
                    f"({req.host.setup or 'none'}); install it or fix setup in the inventory",
                    name,
                )
            )
    found += _judge_files(req, probe)
    for package in required:
        if probe.packages.get(package) is None:
            found.append(
                Finding(
                    "versions",
                    "error",
                    f"{package} is not installed for {probe.executable}; install it or "
                    "fix the host's setup / python in the inventory",
                    name,
                )
            )
    present = probe.gpus
    if req.host.gpu_source == "simulated" and isinstance(req.host.gpus, int):
        present = req.host.gpus
    if req.gpus:
        if present:
            if req.gpus > present:
                found.append(
                    Finding(
                        "gpus",
                        "error",
                        f"{req.gpus} GPUs requested but {present} present; "
                        f"lower --gpus-per-host to {present} or fewer",
                        name,
                    )
                )
        else:
            found.append(
                Finding(
                    "gpus",
                    "warning",
                    f"no NVIDIA GPU found ({probe.gpu_error or 'none listed'}); "
                    f"its {req.gpus} rank(s) will run on CPU",
                    name,
                )
            )
    busy = probe.gpu_processes
    if busy:
        listing = ", ".join(f"pid {p.pid} {p.name} ({p.used_mib} MiB)" for p in busy)
        found.append(
            Finding("gpu-busy", "warning", f"GPUs already used by other processes: {listing}", name)
        )
    return found


def _judge_interface(req: HostRequest, probe: HostProbe) -> list[Finding]:
    """The job's interface is there, up, and has an address (NCCL, Gloo and Open MPI
    bind to it; a missing one fails at the first collective, not at start)."""
    if not req.interface:
        return []
    fix = "set --interface (or --net) or the host's interface in the inventory"
    if req.interface not in probe.interfaces:
        have = ", ".join(probe.interfaces) or "none"
        message = f"network interface {req.interface} not found (it has {have}); {fix}"
        return [Finding("interface", "error", message, req.host.name)]
    state = probe.interface_state
    if state is None:
        return []
    if state.up is False:
        message = f"network interface {req.interface} is down; bring it up or {fix}"
        return [Finding("interface", "error", message, req.host.name)]
    if not state.addresses:
        message = f"network interface {req.interface} has no address; configure it or {fix}"
        return [Finding("interface", "error", message, req.host.name)]
    return []


def _judge_ssh(req: HostRequest, probe: HostProbe) -> list[Finding]:
    found = []
    for peer in req.ssh_peers:
        result = probe.ssh.get(peer)
        if result is None or result.ok:
            continue
        why = result.error or f"status {result.status}"
        found.append(
            Finding(
                "ssh",
                "error",
                f"cannot ssh to {peer} as the launcher will (BatchMode=yes, "
                f"StrictHostKeyChecking=yes): {why}; set up ssh between the job's hosts "
                f"with `{req.keys_hint}`",
                req.host.name,
            )
        )
    return found


def _judge_files(req: HostRequest, probe: HostProbe) -> list[Finding]:
    """The job's working directories and program exist there; mpirun may run as this user."""
    name = req.host.name
    found: list[Finding] = []
    missing_dirs = {d for d in req.dirs if probe.cwd_ok.get(d) is False}
    for directory in sorted(missing_dirs):
        found.append(
            Finding(
                "workdir",
                "error",
                f"working directory {directory} does not exist; create it there or choose "
                "another with --workdir",
                name,
            )
        )
    for (cwd, path), ok in zip(req.files, probe.files_ok, strict=False):
        if not ok and cwd not in missing_dirs:
            found.append(
                Finding(
                    "program",
                    "error",
                    f"{path} not found in {cwd}; put it there (the same path on every "
                    "host of the job) or fix the program path or --workdir",
                    name,
                )
            )
    if req.mpi_launcher and probe.uid == 0:
        found.append(
            Finding(
                "mpi-root",
                "error",
                "mpirun runs as root here and refuses to start; run the job as another user, "
                "or allow it with --env OMPI_ALLOW_RUN_AS_ROOT=1 "
                "--env OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                name,
            )
        )
    return found


def compare_versions(probes: dict[str, HostProbe], packages: Sequence[str]) -> list[Finding]:
    found: list[Finding] = []
    what: dict[str, dict[str, str]] = {"python": {}}
    for host, probe in probes.items():
        what["python"][host] = str(probe.python)
        for package in packages:
            version = probe.packages.get(package)
            what.setdefault(package, {})[host] = "not installed" if version is None else version
    for name, by_host in what.items():
        if len(set(by_host.values())) > 1:
            listing = ", ".join(f"{h} {v}" for h, v in by_host.items())
            found.append(
                Finding(
                    "versions",
                    "error",
                    f"{name} differs across hosts ({listing}); install the same version "
                    "everywhere (or point each host's setup at the same environment)",
                )
            )
    return found
