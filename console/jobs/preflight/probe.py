"""Pre-flight: what would make a launch fail on its hosts, found before anything starts.

Checks (one probe per host, all hosts at once): every port the job's processes listen on
is free on the host that binds it (the master port on the master host; each PS task's
port on its host; the Ray head's and each Ray node's ports), the network interface
exists, is up and has an address on every host, the MPI launcher host reaches every host
of the job by ssh as mpirun/horovodrun will, the launcher programs and the job's own
program and working directory are found, mpirun is not refused for running as root, the
requested GPUs are present, GPUs already busy with other processes (warning), and the
same Python / torch (/ horovod) versions on every host. ``errors`` stop a launch (unless
overridden with ``--skip-preflight``); ``warnings`` are shown and let it go.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from console.errors import PreflightError, TransportError
from console.hostprogs import preflight_probe
from console.inventory import Host
from console.jobs.plan.ports import MASTER_PORT_HINT, ListenPort
from console.jobs.preflight.checks import Finding, HostRequest, compare_versions, judge_host
from console.jobs.preflight.probe_report import HostProbe, parse_probe
from console.transport.base import HostConnection
from console.transport.pool import ClusterConnections
from console.transport.ship import HostProgram, shipment

PROBE_TIMEOUT_S = 60.0


@cache
def probe_source() -> str:
    return Path(preflight_probe.__file__).read_text(encoding="utf-8")


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


async def probe_host(
    conn: HostConnection, request: HostRequest, packages: Sequence[str]
) -> HostProbe:
    args = {
        "ports": [wanted.port for wanted in request.ports],
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
        findings += judge_host(req, outcome, required)
    findings += compare_versions(probes, packages)
    checked = ["hosts", "versions", "gpus"]
    if any(r.ports for r in requests):
        checked.insert(1, "ports")
    if any(r.interface for r in requests):
        checked.insert(1, "interface")
    if any(r.programs for r in requests):
        checked.insert(1, "programs")
    if any(r.ssh_peers for r in requests):
        checked.insert(1, "ssh between hosts")
    return PreflightReport(tuple(findings), probes, tuple(checked))


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
            ports=(
                (ListenPort(master_port, "master port", MASTER_PORT_HINT),)
                if i == 0 and master_port is not None
                else ()
            ),
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
