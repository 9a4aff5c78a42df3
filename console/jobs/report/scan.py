"""One host's jobs scan: ``hostprogs/jobs_scan.py`` shipped to the host, its lines read back.

Each job directory under the host's job root becomes a :class:`HostJob` (its job.json,
its supervisor's record, its processes); ``discover.py`` merges those of every host.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from console.errors import HostProgramError, TransportError
from console.hostprogs import jobs_scan
from console.inventory import Host
from console.jobs.models import JOBS_SUBDIR
from console.transport.base import HostConnection
from console.transport.hello import check_hello
from console.transport.ship import HostProgram, shipment

SCAN_TIMEOUT_S = 60.0


def job_root(host: Host) -> str:
    base = host.work_dir.rstrip("/") or ""
    return f"{base}/{JOBS_SUBDIR}"


@dataclass(frozen=True, slots=True)
class HostJob:
    """One job directory on one host, as the scan read it."""

    host: str
    job_id: str
    dir: str
    document: dict[str, Any] | None
    supervisor: dict[str, Any] | None
    supervisor_alive: bool | None  # None: no supervisor.pid (a job started without one)
    processes: dict[str, dict[str, Any]]
    alive: int
    modified: float | None
    stop_requested: float | None = None  # when ``jobctl stop`` asked (stop-requested)
    problem: str | None = None  # why the scan left its job.json out (not JSON, ...)

    @property
    def unsupervised(self) -> bool:
        return self.supervisor_alive is False and self.alive > 0


def parse_scan(host: str, text: str) -> list[HostJob]:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise HostProgramError(host, jobs_scan.PROGRAM, "printed nothing")
    check_hello(host, jobs_scan.PROGRAM, jobs_scan.VERSION, _json(host, lines[0]))
    found = []
    for line in lines[1:]:
        record = _json(host, line)
        if "done" in record:
            break
        found.append(
            HostJob(
                host=host,
                job_id=str(record["job"]),
                dir=str(record["dir"]),
                document=record.get("document"),
                supervisor=record.get("supervisor")
                if isinstance(record.get("supervisor"), dict)
                else None,
                supervisor_alive=record.get("supervisor_alive"),
                processes=dict(record.get("processes") or {}),
                alive=int(record.get("alive") or 0),
                modified=record.get("modified"),
                problem=str(record["problem"]) if record.get("problem") else None,
                stop_requested=_number(record.get("stop_requested")),
            )
        )
    return found


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _json(host: str, line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError:
        raise HostProgramError(host, jobs_scan.PROGRAM, f"unreadable line {line[:120]!r}") from None
    if not isinstance(value, dict):
        raise HostProgramError(host, jobs_scan.PROGRAM, f"unexpected record {line[:120]!r}")
    return value


def scan_program(
    roots: Sequence[str], known: Iterable[str] = (), host: str | None = None
) -> HostProgram:
    source = resources.files("console.hostprogs").joinpath("jobs_scan.py").read_text()
    # The host's name picks its own supervisor's files where hosts share a home.
    args = json.dumps(
        {"roots": list(roots), "known": sorted(known), "host": host}, separators=(",", ":")
    )
    return HostProgram(jobs_scan.PROGRAM, source, (args,))


async def scan_host(
    conn: HostConnection, *, known: Iterable[str] = (), timeout: float = SCAN_TIMEOUT_S
) -> list[HostJob]:
    """Every job directory under ``conn``'s host's job root (raises TransportError)."""
    program = scan_program([job_root(conn.host)], known, conn.host.name)
    sent = shipment(conn.host, program, setup=False)
    result = await conn.run(sent.command, input=sent.stdin, timeout=timeout)
    if not result.ok:
        detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise TransportError(f"{conn.host.name}: the jobs scan failed ({detail})")
    return parse_scan(conn.host.name, result.stdout)
