"""Housekeeping of the hosts' sync stores (``distconsole gc --sync``, alias ``sync-gc``).

Each ``--sync`` leaves a tree ``trees/NAME-ID`` of hard links into the host's object
store; a changed tree is a new directory and its new contents new objects, so without
this the store only grows. One ``gc`` session of ``hostprogs/sync_program.py`` per host
keeps each name's last ``keep`` synced trees (and any tree a process works in), removes
the others, then the objects no remaining tree links to (but none stored within the
hour: a sync may be linking it now), and answers what it freed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass

from console.errors import JobError, TransportError
from console.jobs.ssh.control import Connections
from console.jobs.sync.push import _records, sync_command
from console.transport.base import HostConnection

GC_TIMEOUT_S = 300.0  # walking a large store and unlinking can take a while
DEFAULT_KEEP = 3


@dataclass(frozen=True, slots=True)
class HostGc:
    """What one host's gc removed (or, in a dry run, would remove)."""

    host: str
    removed: tuple[str, ...]  # tree directories (NAME-ID)
    kept: tuple[str, ...]
    busy: tuple[str, ...]  # kept although old: a process works in them
    objects: int
    bytes_freed: int
    stale: int  # half-built trees and objects of syncs that died
    dry_run: bool


async def gc_host(
    connection: HostConnection,
    *,
    keep: int,
    dry_run: bool,
    names: Sequence[str] | None = None,
) -> HostGc:
    """Run the store's gc on one host (only ``names``' trees when given); JobError names
    the host."""
    host = connection.host.name
    request = json.dumps(
        {"keep": keep, "dry_run": dry_run, "names": list(names) if names else None}
    )
    result = await connection.run(
        sync_command(connection, "gc"), input=request, timeout=GC_TIMEOUT_S
    )
    records = _records(host, result.stdout)
    if not result.ok or not records:
        raise JobError(f"{host}: sync gc failed: {result.stderr.strip()[-500:]}")
    answer = records[-1]
    return HostGc(
        host,
        removed=tuple(answer["removed"]),
        kept=tuple(answer["kept"]),
        busy=tuple(answer["busy"]),
        objects=int(answer["objects"]),
        bytes_freed=int(answer["bytes"]),
        stale=int(answer["stale"]),
        dry_run=bool(answer["dry_run"]),
    )


async def gc_hosts(
    connections: Connections,
    names: Sequence[str],
    *,
    keep: int = DEFAULT_KEEP,
    dry_run: bool = False,
    tree_names: Sequence[str] | None = None,
) -> dict[str, HostGc | str]:
    """Every host at once: its :class:`HostGc`, or why it could not be cleaned."""

    async def one(name: str) -> HostGc | str:
        try:
            return await gc_host(connections[name], keep=keep, dry_run=dry_run, names=tree_names)
        except (JobError, TransportError) as exc:
            return str(exc)

    outcomes = await asyncio.gather(*(one(n) for n in names))
    return dict(zip(names, outcomes, strict=True))
