"""The post-mortem bundle of a job, any state: ``distconsole report`` and the jobs screen.

Each host's job directory comes over the host's existing connection as ONE bounded
tar stream (``hostprogs/job_pack.py``: records first, logs last, big files cut to
their end, the job's secret never sent). The bundle, in ``OUT``::

    summary.txt              what happened, first failure or hang, which rank, where
                             it was stuck (the top frames of the stuck rank's stack)
    plan.json                the plan the job was launched with
    timeline.txt             every host's events.jsonl merged by time (a spare-joined
                             event with the host it replaced and its cause)
    hosts/HOST/...           that host's job directory: NAME.sh (the exact command and
                             environment of each process), logs, hang/, gpu-samples.jsonl,
                             supervisor.json, events.jsonl, exit files
    hosts/HOST/_pack.json    what was cut or skipped there (also said in summary.txt)

:func:`summary_lines` is what the jobs screen shows for the selected job.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path, PurePosixPath

from console.errors import HostProgramError, JobError, TransportError
from console.hostprogs import job_pack
from console.jobs.history import JobRecord
from console.jobs.models import JobPlan
from console.jobs.notify import masked_bytes, masked_document
from console.jobs.plan_json import plan_to_json
from console.jobs.private import private_dir, write_private
from console.jobs.report.env_masking import EnvSecrets, env_secrets, masked_env_bytes
from console.jobs.report.env_masking import masked_env_document as masked_env
from console.jobs.report.slow_ranks import pace_source
from console.jobs.report.summary import HostBundle as HostBundle
from console.jobs.report.summary import compose_summary
from console.jobs.report.summary import host_view_lines as host_view_lines
from console.jobs.report.summary import process_lines as process_lines
from console.jobs.report.summary import stuck_rank as stuck_rank
from console.jobs.report.summary import summary_lines as summary_lines
from console.jobs.report.timeline import timeline, timeline_text
from console.jobs.ssh.control import Connections
from console.transport.base import HostConnection
from console.transport.hello import check_hello
from console.transport.ship import HostProgram, shipment

FILE_MAX = 8 << 20  # bytes kept of one file (its end)
TOTAL_MAX = 96 << 20  # bytes packed per host


def pack_program(job_dir: str, file_max: int, total_max: int) -> HostProgram:
    source = resources.files("console.hostprogs").joinpath("job_pack.py").read_text()
    args = {"job_dir": job_dir, "file_max": file_max, "total_max": total_max}
    return HostProgram(job_pack.PROGRAM, source, (json.dumps(args),))


async def fetch_host(
    conn: HostConnection,
    job_dir: str,
    *,
    file_max: int = FILE_MAX,
    total_max: int = TOTAL_MAX,
    timeout: float = 300.0,
) -> HostBundle:
    """``job_dir`` of ``conn``'s host, read into memory (never raises for the host)."""
    bundle = HostBundle(conn.host.name)
    sent = shipment(conn.host, pack_program(job_dir, file_max, total_max), setup=False)
    try:
        async with asyncio.timeout(timeout):
            process = await conn.start_bytes(sent.command)
            try:
                await process.write(sent.stdin)
                process.write_eof()
                received = bytearray()
                # gzip never grows text much: twice the packed limit is a broken stream.
                async for chunk in process.chunks():
                    received += chunk
                    if len(received) > 2 * total_max + (1 << 20):
                        raise TransportError(f"{conn.host.name}: the pack is larger than asked")
                status = await process.wait()
            finally:
                process.close()
    except TimeoutError:
        bundle.error = f"not fetched within {timeout:g} s"
        return bundle
    except TransportError as exc:
        bundle.error = str(exc)
        return bundle
    head, _, body = bytes(received).partition(b"\n")
    try:
        check_hello(conn.host.name, job_pack.PROGRAM, job_pack.VERSION, json.loads(head or b"0"))
    except (ValueError, HostProgramError) as exc:
        bundle.error = str(exc)
        return bundle
    if status != 0 and not body:
        bundle.error = f"no job directory {job_dir} there (status {status})"
        return bundle
    try:
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
            for member in tar:
                handle = tar.extractfile(member) if member.isfile() else None
                if handle is not None:
                    bundle.files[member.name] = handle.read()
    except (tarfile.TarError, EOFError, OSError) as exc:
        bundle.error = f"the pack ended early ({exc}); what came is kept"
    manifest = bundle.files.pop(job_pack.MANIFEST, None)
    bundle.manifest = json.loads(manifest) if manifest else {}
    return bundle


# -- the summary ---------------------------------------------------------------------


def _safe(relpath: str) -> PurePosixPath | None:
    path = PurePosixPath(relpath)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        return None
    return path


def _masked(name: str, data: bytes, plan: JobPlan, secrets: EnvSecrets) -> bytes:
    """A host's file as the bundle keeps it: no webhook URL nor notify command in clear
    (the documents that carry them masked field by field, every file by the plan's URLs),
    nor the job's --env values (``report/env_masking.py``: wrappers and documents)."""
    base = PurePosixPath(name).name
    if base == "job.json" or base.startswith("supervisor-config"):
        # Not JSON: the plan's URLs are still replaced below.
        with contextlib.suppress(ValueError, RecursionError):
            doc = masked_env(masked_document(json.loads(data)), secrets)
            data = json.dumps(doc).encode()
    return masked_bytes(masked_env_bytes(name, data, secrets), plan.notify)


def write_bundle(
    record: JobRecord,
    bundles: Sequence[HostBundle],
    out: Path,
    validated: Mapping[str, str] | None = None,
) -> Path:
    """The bundle under ``out``, private (700/600): it holds the job's env and logs."""
    private_dir(out, tighten_existing=False)  # --out may name an existing folder (".")
    write_private(out / "summary.txt", compose_summary(record, bundles, validated))
    secrets = env_secrets(record.plan, (b.json("job.json") for b in bundles))
    # Webhooks and --env values: secrets.
    plan_data = masked_env(masked_document(json.loads(plan_to_json(record.plan))), secrets)
    write_private(out / "plan.json", json.dumps(plan_data, indent=2))
    leader = next((b for b in bundles if record.hosts and b.host == record.hosts[0]), None)
    pace = pace_source(record.host_view, leader.json("supervisor.json") if leader else None)
    write_private(out / "timeline.txt", timeline_text(timeline(bundles, pace)))
    for bundle in bundles:
        base = private_dir(out / "hosts") / bundle.host
        private_dir(base)
        for name, data in bundle.files.items():
            relative = _safe(name)
            if relative is None:
                continue  # a name that would leave the bundle's folder
            folder = base
            for part in relative.parts[:-1]:
                folder = private_dir(folder / part)
            write_private(folder / relative.parts[-1], _masked(name, data, record.plan, secrets))
        if bundle.manifest:
            write_private(base / job_pack.MANIFEST, json.dumps(bundle.manifest, indent=2))
    return out / "summary.txt"


async def make_report(
    connections: Connections,
    record: JobRecord,
    out: Path,
    *,
    file_max: int = FILE_MAX,
    total_max: int = TOTAL_MAX,
    validated: Mapping[str, str] | None = None,
) -> tuple[Path, list[HostBundle]]:
    """Fetch every host's job directory at once and write the bundle to ``out``
    (``validated``: see :func:`summary_lines`)."""
    hosts = list(record.plan.job_dirs)
    if not hosts:
        raise JobError(f"job {record.id}: its plan names no job directory")

    async def one(host: str) -> HostBundle:
        try:
            conn = connections[host]
        except KeyError as exc:
            return HostBundle(host, error=str(exc))
        return await fetch_host(
            conn, record.plan.job_dirs[host], file_max=file_max, total_max=total_max
        )

    bundles = list(await asyncio.gather(*(one(h) for h in hosts)))
    summary = await asyncio.to_thread(write_bundle, record, bundles, out, validated)
    return summary, bundles
