"""Pre-flight: what would make a launch fail on its hosts, found before anything starts.

Checks (one probe per host, all hosts at once): the master port is free on the master
host, the network interface exists, is up and has an address on every host, the MPI
launcher host reaches every host of the job by ssh as mpirun/horovodrun will, the
launcher programs and the job's own program and working directory are found, mpirun
is not refused for running as root, the requested GPUs are present, GPUs already busy
with other processes (warning), and the same Python / torch (/ horovod) versions on
every host. ``errors`` stop a launch (unless overridden with ``--skip-preflight``);
``warnings`` are shown and let it go.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from console.errors import PreflightError, TransportError
from console.hostprogs import preflight_probe
from console.hostprogs.ship import HostProgram, shipment
from console.inventory import Host
from console.jobs.probe_report import HostProbe, parse_probe
from console.transport.base import HostConnection
from console.transport.pool import ClusterConnections

PROBE_TIMEOUT_S = 60.0
Severity = Literal["error", "warning"]


@cache
def probe_source() -> str:
    return Path(preflight_probe.__file__).read_text(encoding="utf-8")


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
class PreflightReport:
    findings: tuple[Finding, ...]
    probes: dict[str, HostProbe] = field(default_factory=dict)
    checked: tuple[str, ...] = ()  # names of the checks that ran

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "warning")

    @property
    def ok(self) -> bool:
        return not self.errors

    def describe(self) -> str:
        lines = [f.line() for f in self.findings]
        hosts = len(self.probes)
        verdict = "passed" if self.ok else f"failed ({len(self.errors)} problem(s))"
        lines.append(f"pre-flight {verdict}: {', '.join(self.checked)} checked on {hosts} host(s)")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "checked": list(self.checked),
            "findings": [
                {"check": f.check, "severity": f.severity, "host": f.host, "message": f.message}
                for f in self.findings
            ],
            "hosts": {name: probe.to_json() for name, probe in self.probes.items()},
        }

    def raise_if_failed(self) -> None:
        if not self.ok:
            raise PreflightError(
                "pre-flight failed; nothing was started:\n"
                + "\n".join(f.line() for f in self.errors)
                + "\nfix the above, or launch with --skip-preflight to start anyway",
                report=self,
            )


@dataclass(frozen=True, slots=True)
class HostRequest:
    """What one host must offer for the job."""

    host: Host
    port: int | None = None  # must be free (the master host only)
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


async def probe_host(
    conn: HostConnection, request: HostRequest, packages: Sequence[str]
) -> HostProbe:
    args = {
        "port": request.port,
        "programs": list(request.programs),
        "packages": list(packages),
        "files": [list(pair) for pair in request.files],
        "dirs": list(request.dirs),
        "interface": request.interface,
        "ssh_peers": list(request.ssh_peers),
    }
    program = HostProgram(preflight_probe.PROGRAM, probe_source(), (json.dumps(args),))
    # In bash, as the job wrappers run setup (setup lines may `source`).
    sent = shipment(request.host, program, bash=True)
    result = await conn.run(sent.command, timeout=PROBE_TIMEOUT_S, input=sent.stdin)
    found = parse_probe(request.host.name, result.stdout)
    if found is not None:
        return found
    detail = (result.stderr.strip() or result.stdout.strip())[-500:]
    what = "the host's setup line or the probe" if request.host.setup else "the probe"
    raise TransportError(
        f"{what} did not run with {request.host.python} (status {result.exit_status}): {detail}"
    )


async def run_preflight(
    connections: Mapping[str, HostConnection] | Any,
    requests: Sequence[HostRequest],
    *,
    packages: Sequence[str] = ("torch",),
    required: Sequence[str] = (),
) -> PreflightReport:
    """Probe every requested host at once and judge the answers (see module doc).

    ``packages`` are compared across hosts; ``required`` ones must be installed.
    """
    findings: list[Finding] = []
    probes: dict[str, HostProbe] = {}
    live: list[HostRequest] = []
    for req in requests:
        status = connections[req.host.name].status
        if status.is_up:
            live.append(req)
        else:
            reason = f" ({status.reason})" if status.reason else ""
            findings.append(
                Finding(
                    "host",
                    "error",
                    f"is {status.state.value}{reason}; bring it back or leave it out of the job",
                    req.host.name,
                )
            )
    outcomes = await asyncio.gather(
        *(probe_host(connections[r.host.name], r, packages) for r in live),
        return_exceptions=True,
    )
    for req, outcome in zip(live, outcomes, strict=True):
        name = req.host.name
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, Exception):
                raise outcome
            findings.append(Finding("host", "error", f"probe failed: {outcome}", name))
            continue
        probes[name] = outcome
        findings += _judge_host(req, outcome, required)
    findings += _compare_versions(probes, packages)
    checked = ["hosts", "versions", "gpus"]
    if any(r.port for r in requests):
        checked.insert(1, "master port")
    if any(r.interface for r in requests):
        checked.insert(1, "interface")
    if any(r.programs for r in requests):
        checked.insert(1, "programs")
    if any(r.ssh_peers for r in requests):
        checked.insert(1, "ssh between hosts")
    return PreflightReport(tuple(findings), probes, tuple(checked))


def _judge_host(req: HostRequest, probe: HostProbe, required: Sequence[str]) -> list[Finding]:
    name = req.host.name
    found: list[Finding] = []
    if req.port is not None and probe.port_free is False:
        found.append(
            Finding(
                "port",
                "error",
                f"master port {req.port} is in use ({probe.port_error or 'bind failed'}); "
                "choose another with --master-port (or leave it out to get a free one)",
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


def _compare_versions(probes: dict[str, HostProbe], packages: Sequence[str]) -> list[Finding]:
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


async def preflight_hosts(
    connections: Any,
    hosts: Sequence[Host],
    *,
    master_port: int | None = None,
    interface: str | None = None,
) -> PreflightReport:
    """``distconsole check HOSTS --preflight``: the checks that need no job."""
    requests = [
        HostRequest(
            host=h,
            port=master_port if i == 0 else None,
            interface=interface or h.interface,
            gpus=h.gpus if isinstance(h.gpus, int) else 0,
        )
        for i, h in enumerate(hosts)
    ]
    return await run_preflight(connections, requests)


async def _check_hosts(hosts: Sequence[Host]) -> PreflightReport:
    pool = ClusterConnections(hosts)
    try:
        await pool.wait_settled()
        return await preflight_hosts(pool, hosts)
    finally:
        await pool.close()


def check_command(hosts: Sequence[Host], *, as_json: bool) -> int:
    """``distconsole check HOSTS --preflight``: print the report; 0 passed, 1 failed."""
    report = asyncio.run(_check_hosts(hosts))
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report.describe())
    return 0 if report.ok else 1
