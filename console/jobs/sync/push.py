"""``--sync DIR``: put a scanned tree on every host of a job, and plan the job inside it.

Per host, in parallel: one ``check`` round trip (``hostprogs/sync_program.py``) says
whether the tree is already there and which objects the host lacks; only when something
is missing does a ``put`` session send those objects (base64 lines on the session's
stdin, so nothing but the existing SSH connection is needed) and build the tree. An
unchanged tree costs one round trip per host. Progress (bytes and files per host) goes
to a callback: the CLI prints it, the launch form shows it.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from console.errors import JobError, JobSpecError
from console.hostprogs import sync_program
from console.jobs.spec import JobSpec, spec_with
from console.jobs.sync.tree import (
    DEFAULT_MAX_FILE,
    DEFAULT_MAX_TOTAL,
    REMOTE_ROOT,
    SyncTree,
    scan_tree,
)
from console.names import path_stem
from console.transport.base import HostConnection
from console.transport.hello import check_hello
from console.transport.ship import HostProgram, shipment

CHECK_TIMEOUT_S = 60.0
LINE_RAW = sync_program.LINE_RAW


@dataclass(frozen=True, slots=True)
class SyncProgress:
    host: str
    phase: str  # "checking", "sending", "building", "ready"
    files_done: int = 0
    files_total: int = 0
    bytes_done: int = 0
    bytes_total: int = 0

    def line(self) -> str:
        if self.phase == "sending":
            return (
                f"{self.host}: sending {self.files_done}/{self.files_total} files, "
                f"{self.bytes_done / 1e6:.1f}/{self.bytes_total / 1e6:.1f} MB"
            )
        return f"{self.host}: {self.phase}"


@dataclass(frozen=True, slots=True)
class HostSync:
    """What one host's sync did: ``objects_sent`` 0 and ``reused`` for an unchanged tree."""

    host: str
    tree: str  # the tree's directory, as the host expanded it
    reused: bool
    objects_sent: int
    bytes_sent: int
    seconds: float


ProgressCallback = Callable[[SyncProgress], None]


@functools.cache
def program_source() -> str:
    text = resources.files("console.hostprogs").joinpath("sync_program.py").read_text()
    if text.startswith('"""'):
        text = text[text.index('"""', 3) + 3 :].lstrip("\n")
    return "# distconsole sync helper (console/hostprogs/sync_program.py)\n" + text


def sync_command(connection: HostConnection, op: str) -> str:
    program = HostProgram(sync_program.PROGRAM, program_source(), (op, REMOTE_ROOT), stdin="")
    return shipment(connection.host, program, setup=False).command


def scan_for_spec(spec: JobSpec) -> SyncTree | None:
    """The spec's ``--sync`` tree, scanned with its limits (None without ``--sync``)."""
    if spec.sync is None:
        return None
    return scan_tree(
        spec.sync,
        max_total=spec.sync_max_size or DEFAULT_MAX_TOTAL,
        max_file=spec.sync_max_file or DEFAULT_MAX_FILE,
    )


def synced_workdir(tree: SyncTree, workdir: str | None) -> str | None:
    """The working directory a job synced with ``tree`` runs in: the tree's root, or the
    relative ``workdir`` under it; an absolute (or ``~/``) ``workdir`` stays as given.
    The tree has the same ``~/`` path on every host, so one value serves every host."""
    return _workdir_under(tree.remote_dir, workdir)


def _workdir_under(root: str, workdir: str | None) -> str | None:
    if workdir and (workdir.startswith("/") or workdir.startswith("~")):
        return workdir
    return root + (f"/{workdir.strip('/')}" if workdir else "")


# Stands for the tree's content hash where it is not computed (the launch form's preview).
TREE_ID_PLACEHOLDER = "<content-id>"


def spec_in_unscanned_tree(spec: JobSpec) -> JobSpec:
    """``spec`` as :func:`spec_in_tree` plans it, without reading the directory: the
    tree's id (its content hash) is :data:`TREE_ID_PLACEHOLDER`. For previews redrawn
    on every keystroke, where hashing a large directory each time would stall."""
    if spec.sync is None:
        return spec
    name = path_stem(Path(spec.sync).expanduser().resolve().name, limit=40)
    root = f"{REMOTE_ROOT}/trees/{name}-{TREE_ID_PLACEHOLDER}"
    workdir = _workdir_under(root, spec.workdir)
    return spec if workdir == spec.workdir else spec_with(spec, workdir=workdir)


def spec_in_tree(spec: JobSpec, tree: SyncTree | None) -> JobSpec:
    """``spec`` with its working directory inside the synced tree (unchanged without one).
    Planning with it puts every process (a launcher's ranks on the other hosts included)
    and pre-flight's program check in the tree, rather than patching launches afterwards."""
    if tree is None:
        return spec
    workdir = synced_workdir(tree, spec.workdir)
    return spec if workdir == spec.workdir else spec_with(spec, workdir=workdir)


def _records(host: str, text: str) -> list[dict[str, Any]]:
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            raise JobError(f"{host}: sync: unreadable answer {line[:200]!r}") from None
    if not records:
        raise JobError(f"{host}: sync: the helper said nothing")
    check_hello(host, sync_program.PROGRAM, sync_program.VERSION, records[0])
    for record in records[1:]:
        if "error" in record:
            raise JobError(f"{host}: sync: {record['error']}")
    return records[1:]


async def sync_host(
    connection: HostConnection, tree: SyncTree, on_progress: ProgressCallback | None = None
) -> HostSync:
    """Put ``tree`` on one host (see the module doc); JobError names the host."""
    host = connection.host.name
    started = time.monotonic()
    note = on_progress or (lambda _p: None)
    note(SyncProgress(host, "checking"))
    manifest = json.dumps(tree.manifest(), separators=(",", ":"))
    result = await connection.run(
        sync_command(connection, "check"), input=manifest, timeout=CHECK_TIMEOUT_S
    )
    records = _records(host, result.stdout)
    if not result.ok or not records:
        raise JobError(f"{host}: sync check failed: {result.stderr.strip()[-500:]}")
    answer = records[-1]
    if answer.get("ready"):
        note(SyncProgress(host, "ready", len(tree.entries), len(tree.entries)))
        return HostSync(host, str(answer["tree"]), True, 0, 0, time.monotonic() - started)
    missing = set(answer.get("missing", []))
    sizes = {e.oid: e.size for e in tree.entries}
    paths = {e.oid: Path(tree.source) / e.path for e in tree.entries}
    to_send = sorted(missing & sizes.keys())
    total = sum(sizes[o] for o in to_send)
    sent = await _put(connection, tree, manifest, to_send, sizes, paths, total, note)
    return HostSync(host, sent, False, len(to_send), total, time.monotonic() - started)


async def _put(
    connection: HostConnection,
    tree: SyncTree,
    manifest: str,
    oids: Sequence[str],
    sizes: dict[str, int],
    paths: dict[str, Path],
    total: int,
    note: ProgressCallback,
) -> str:
    host = connection.host.name
    process = await connection.start(sync_command(connection, "put"))
    lines: list[str] = []

    async def read() -> None:
        async for line in process.lines():
            lines.append(line)

    reader = asyncio.create_task(read())
    try:
        await process.write(manifest + "\n")
        done_bytes = 0
        for count, oid in enumerate(oids, 1):
            await process.write(f"{oid} {sizes[oid]}\n")
            with paths[oid].open("rb") as handle:
                while chunk := handle.read(LINE_RAW):
                    await process.write(base64.b64encode(chunk).decode() + "\n")
                    done_bytes += len(chunk)
                    note(SyncProgress(host, "sending", count - 1, len(oids), done_bytes, total))
            note(SyncProgress(host, "sending", count, len(oids), done_bytes, total))
        await process.write(".\n")
        process.write_eof()
        note(SyncProgress(host, "building", len(oids), len(oids), done_bytes, total))
        status = await process.wait()
        await reader
    except BaseException:
        process.close()
        reader.cancel()
        raise
    records = _records(host, "\n".join(lines))
    if status != 0 or not records or "tree" not in records[-1]:
        raise JobError(f"{host}: sync failed (status {status}): {records[-1:] or 'no answer'}")
    note(SyncProgress(host, "ready", len(oids), len(oids), done_bytes, total))
    return str(records[-1]["tree"])


async def sync_hosts(
    connections: Any,
    host_names: Sequence[str],
    tree: SyncTree,
    on_progress: ProgressCallback | None = None,
) -> dict[str, HostSync]:
    """Sync ``tree`` to every host at once; the first failure is raised naming its host
    (the other hosts finish theirs: what they stored is reused next time)."""
    names = list(dict.fromkeys(host_names))
    outcomes = await asyncio.gather(
        *(sync_host(connections[n], tree, on_progress) for n in names), return_exceptions=True
    )
    for name, outcome in zip(names, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            if isinstance(outcome, JobSpecError | JobError):
                raise outcome
            if isinstance(outcome, Exception):
                raise JobError(f"{name}: sync failed: {outcome}") from outcome
            raise outcome
    return {n: o for n, o in zip(names, outcomes, strict=True) if isinstance(o, HostSync)}
