"""Housekeeping of the hosts' job directories (``distconsole gc``).

Every job leaves its directory (logs, captures, wrappers) under each host's job root,
and a Ray job its temp dir in /tmp. One run of ``hostprogs/jobs_gc.py`` per host removes
those of ended jobs older than a cutoff, keeping the last ``keep`` ended, never a job
whose processes still run, and answers what it freed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from console.errors import HostProgramError, JobError, TransportError
from console.hostprogs import jobs_gc
from console.jobs.models import JOBS_SUBDIR
from console.jobs.ssh.control import Connections
from console.transport.base import HostConnection
from console.transport.hello import check_hello
from console.transport.ship import HostProgram, shipment

GC_TIMEOUT_S = 300.0  # walking many job directories and unlinking can take a while
DEFAULT_OLDER_THAN_S = 30 * 86400.0
DEFAULT_KEEP = 0


@dataclass(frozen=True, slots=True)
class GcJob:
    """One job directory as the gc judged it."""

    job_id: str  # "" for an orphaned Ray temp dir (its job directory already gone)
    action: str  # removed (or would be) | running | kept | recent
    bytes: int = 0
    ray_dir: str | None = None
    why: str | None = None  # for running: which process, or why it may run


@dataclass(frozen=True, slots=True)
class HostJobsGc:
    """What one host's gc removed (or, in a dry run, would remove)."""

    host: str
    jobs: tuple[GcJob, ...]
    bytes_freed: int
    dry_run: bool

    def with_action(self, action: str) -> tuple[GcJob, ...]:
        return tuple(j for j in self.jobs if j.action == action)

    def as_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "dry_run": self.dry_run,
            "bytes_freed": self.bytes_freed,
            "jobs": [
                {
                    "id": j.job_id or None,
                    "action": j.action,
                    "bytes": j.bytes,
                    "ray_dir": j.ray_dir,
                    "why": j.why,
                }
                for j in self.jobs
            ],
        }


def job_root(work_dir: str) -> str:
    """Where ``jobs`` and ``gc`` find the job directories (report/discover.py's too)."""
    return f"{work_dir.rstrip('/')}/{JOBS_SUBDIR}"


def gc_program(host: str, *, older_than: float, keep: int, dry_run: bool, root: str) -> HostProgram:
    source = resources.files("console.hostprogs").joinpath("jobs_gc.py").read_text()
    args = {
        "roots": [root],
        "host": host,
        "older_than": older_than,
        "keep": keep,
        "dry_run": dry_run,
    }
    return HostProgram(jobs_gc.PROGRAM, source, (json.dumps(args, separators=(",", ":")),))


def parse_gc(host: str, text: str) -> HostJobsGc:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise HostProgramError(host, jobs_gc.PROGRAM, "printed nothing")
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            raise HostProgramError(
                host, jobs_gc.PROGRAM, f"unreadable line {line[:120]!r}"
            ) from None
    check_hello(host, jobs_gc.PROGRAM, jobs_gc.VERSION, records[0])
    done = records[-1]
    if "done" not in done:
        raise HostProgramError(host, jobs_gc.PROGRAM, "ended before its summary")
    jobs = tuple(
        GcJob(
            str(r.get("job") or ""),  # "" for a Ray temp dir of no job directory here
            str(r["action"]),
            int(r.get("bytes") or 0),
            r.get("ray"),
            r.get("why"),
        )
        for r in records[1:-1]
    )
    return HostJobsGc(host, jobs, int(done["bytes"]), bool(done["dry_run"]))


async def gc_host(
    connection: HostConnection, *, older_than: float, keep: int, dry_run: bool
) -> HostJobsGc:
    """Run the jobs gc on one host; JobError names the host."""
    host = connection.host
    program = gc_program(
        host.name, older_than=older_than, keep=keep, dry_run=dry_run, root=job_root(host.work_dir)
    )
    sent = shipment(host, program, setup=False)
    result = await connection.run(sent.command, input=sent.stdin, timeout=GC_TIMEOUT_S)
    if not result.ok:
        detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise JobError(f"{host.name}: the jobs gc failed ({detail})")
    return parse_gc(host.name, result.stdout)


async def gc_hosts(
    connections: Connections,
    names: Sequence[str],
    *,
    older_than: float = DEFAULT_OLDER_THAN_S,
    keep: int = DEFAULT_KEEP,
    dry_run: bool = False,
) -> dict[str, HostJobsGc | str]:
    """Every host at once: its :class:`HostJobsGc`, or why it could not be cleaned."""

    async def one(name: str) -> HostJobsGc | str:
        try:
            return await gc_host(
                connections[name], older_than=older_than, keep=keep, dry_run=dry_run
            )
        except (JobError, TransportError) as exc:
            return str(exc)

    outcomes = await asyncio.gather(*(one(n) for n in names))
    return dict(zip(names, outcomes, strict=True))
