"""The job pack: one job directory as one gzip'd tar stream, bounded in size.

Sent on stdin to ``python3 -u - ARGS_JSON`` (standard library only, Python >= 3.7).
``ARGS_JSON``: ``{"job_dir": PATH, "file_max": BYTES, "total_max": BYTES}``. Writes
its versioned hello as one JSON line, then the tar stream (``w|gz``) of the job
directory: the job's records first (job.json, supervisor.json, events.jsonl, hang
captures, wrappers, exit files, GPU samples), then logs. A file larger than
``file_max`` keeps its LAST ``file_max`` bytes (the end of a log says how it ended);
once ``total_max`` bytes are packed the rest is skipped. The last member,
``_pack.json``, lists what was cut and what was skipped, so the report can say so.
The job's secret (``*.secret``) and temporary files never leave the host.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
import time
from typing import Any

PROGRAM = "job_pack"
VERSION = 1
MANIFEST = "_pack.json"
NEVER = (".secret", ".tmp")
# Packed first, in this order: what the report's summary reads.
FIRST = ("job.json", "supervisor.json", "events.jsonl", "hang/", ".sh", ".exit", "gpu-samples")


def priority(relpath: str) -> int:
    # A follower's records carry its host's name (supervisor.HOST.json, events.HOST.jsonl).
    if relpath.startswith("supervisor.") and relpath.endswith(".json"):
        return FIRST.index("supervisor.json")
    if relpath.startswith("events.") and relpath.endswith(".jsonl"):
        return FIRST.index("events.jsonl")
    for index, mark in enumerate(FIRST):
        if relpath.startswith(mark) or relpath.endswith(mark) or mark in relpath:
            return index
    return len(FIRST)


# A Ray job's ``ray-tmp`` links to its node's Ray temp dir (/tmp/dcray-...); links are
# not followed, but the node's Ray logs are packed through it (not the sockets, the
# runtime resources nor the metrics): its raylet's, and on the head the GCS server's,
# the dashboard's and the autoscaler monitor's; the workers' output on every node.
# After the job's own files: when the host's limit is reached, Ray's go first.
RAY_LOGS = ("ray-tmp", "session_latest", "logs")
RAY_FIRST = ("raylet.", "gcs_server.", "monitor.", "worker-", "dashboard.")


def ray_logs(job_dir: str) -> list[str]:
    top = os.path.join(job_dir, *RAY_LOGS)
    if not os.path.isdir(top):
        return []
    found = []
    for root, dirs, names in os.walk(top):  # os.walk follows no link below the top
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(root, name)
            if not os.path.islink(path) and os.path.isfile(path):
                found.append("/".join((*RAY_LOGS, os.path.relpath(path, top))))
    return found


def ray_priority(relpath: str) -> int:
    name = relpath[len("/".join(RAY_LOGS)) + 1 :]
    for index, mark in enumerate(RAY_FIRST):
        if name.startswith(mark):
            return index
    return len(RAY_FIRST)


def files_of(job_dir: str) -> list[str]:
    found = []
    for root, dirs, names in os.walk(job_dir):
        dirs.sort()
        for name in names:
            path = os.path.join(root, name)
            relpath = os.path.relpath(path, job_dir)
            if name.endswith(NEVER) or os.path.islink(path) or not os.path.isfile(path):
                continue
            found.append(relpath)
    ordered = sorted(found, key=lambda r: (priority(r), r))
    return ordered + sorted(ray_logs(job_dir), key=lambda r: (ray_priority(r), r))


def add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(mtime)
    info.mode = 0o600  # the job's logs and env: private wherever the tar is unpacked
    tar.addfile(info, io.BytesIO(data))


def pack(job_dir: str, out: Any, file_max: int, total_max: int) -> None:
    truncated: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    packed = 0
    with tarfile.open(fileobj=out, mode="w|gz") as tar:
        for relpath in files_of(job_dir):
            path = os.path.join(job_dir, relpath)
            try:
                size = os.stat(path).st_size
                mtime = os.stat(path).st_mtime
                keep = min(size, file_max, max(0, total_max - packed))
                if keep <= 0 and size > 0:
                    skipped.append({"file": relpath, "bytes": size})
                    continue
                with open(path, "rb") as handle:
                    if keep < size:
                        handle.seek(size - keep)
                    data = handle.read(keep)
            except OSError as exc:
                skipped.append({"file": relpath, "error": str(exc)})
                continue
            if len(data) < size:
                truncated.append({"file": relpath, "bytes": size, "kept": len(data)})
            add_bytes(tar, relpath, data, mtime)
            packed += len(data)
        manifest = {
            "job_dir": job_dir,
            "packed": packed,
            "file_max": file_max,
            "total_max": total_max,
            "truncated": truncated,
            "skipped": skipped,
            "at": time.time(),
        }
        add_bytes(tar, MANIFEST, json.dumps(manifest).encode(), time.time())


def main() -> None:
    args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    job_dir = os.path.expanduser(args["job_dir"])
    out = sys.stdout.buffer
    out.write((json.dumps({"program": PROGRAM, "v": VERSION}) + "\n").encode())
    if not os.path.isdir(job_dir):
        out.flush()
        sys.stderr.write("no job directory " + job_dir + "\n")
        sys.exit(3)
    pack(job_dir, out, int(args.get("file_max", 4 << 20)), int(args.get("total_max", 64 << 20)))
    out.flush()


if __name__ == "__main__":
    main()
