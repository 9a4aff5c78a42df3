"""The jobs gc: remove ended jobs' directories (and their Ray temp dirs) on a host.

Sent on stdin to ``python3 -u - ARGS_JSON`` (no setup line: standard library only,
Python >= 3.7). ``ARGS_JSON``: ``{"roots": [job root, ...], "host": the inventory's name
of this host, "older_than": seconds, "keep": N, "dry_run": bool}``.

Every directory under each root (``<work_dir>/.distconsole/jobs``) is one job. A job
still runs while any process of this user works for it: a process group or session it
recorded here with no exit status, a process carrying its marker
(``DISTCONSOLE_JOB_ID``), or one whose command line or working directory is in the job
directory (its wrappers, its supervisor). A process recorded on another machine (hosts
sharing a home) with no exit status, in a job whose supervisor recorded no final
state, may run there: the job is kept too, and so is one with no process recorded yet
that changed within the last minute (being started). Of the ended jobs, the ``keep``
that ended last stay, and so does every job that ended within ``older_than`` seconds
(its newest file's time); the rest go with their Ray temp dir (``/tmp/dcray-<digest>``,
named as in ``console/jobs/plan/ray.py``; only a directory this user owns). A job kept
is made private (700/600) as every other command that touches it does. Then a Ray temp
dir of this user's that belongs to no job directory here (another host sharing the home
removed it) goes too, once older than ``older_than`` and no process uses it.

Prints its versioned hello, one line per job ``{"job", "action": "removed" | "running"
| "kept" | "recent", "ended": epoch|null, "bytes", "ray": PATH|null, "why"}``, one per
orphaned Ray temp dir removed ``{"job": null, "action": "removed", "ray": PATH, ...}``,
then ``{"done": N, "bytes": freed, "dry_run": bool}``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import sys
import time
from typing import Any

PROGRAM = "jobs_gc"
VERSION = 1
MARKER = "DISTCONSOLE_JOB_ID"  # console/names.py JOB_ID_VAR
PGID_SUFFIX = ".pgid"
MACHINE_SUFFIX = ".machine"
EXIT_SUFFIX = ".exit"
SUPERVISOR_FILE = "supervisor.json"
FINAL_STATES = ("succeeded", "failed", "stopped")
RAY_TEMP_ROOT = "/tmp"  # console/jobs/plan/ray.py TEMP_ROOT and private_dir()
RAY_PREFIX = "dcray-"
JOB_FILE = "job.json"  # its "hosts": every host of the job (their Ray dirs are known)
STARTING_S = 60.0  # a job directory with no process recorded, changed this recently


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")


def read_text(path: str, limit: int = 1 << 16) -> str | None:
    try:
        with open(path) as handle:
            return handle.read(limit).strip()
    except (OSError, UnicodeDecodeError):
        return None


def ray_dir(job_id: str, host: str) -> str:
    digest = hashlib.sha256(f"{job_id}\0{host}".encode()).hexdigest()[:12]
    return f"{RAY_TEMP_ROOT}/{RAY_PREFIX}{digest}"


class Processes:
    """This user's live processes (not zombies): groups, sessions, and, read on demand,
    their command lines, working directories and markers."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int]] = []  # pid, pgid, sid
        me = os.getpid()
        for entry in os.listdir("/proc"):
            stat_text = read_text("/proc/" + entry + "/stat") if entry.isdigit() else None
            if not stat_text or int(entry) == me:
                continue
            fields = stat_text[stat_text.rfind(")") + 2 :].split()
            if len(fields) >= 4 and fields[0] not in ("Z", "X"):
                self.rows.append((int(entry), int(fields[2]), int(fields[3])))
        self.cwd: dict[int, str] = {}
        self.words: dict[int, list[bytes]] = {}
        for pid, _pgid, _sid in self.rows:
            with contextlib.suppress(OSError):
                self.cwd[pid] = os.readlink(f"/proc/{pid}/cwd")  # only this user's
            words: list[bytes] = []
            for name in ("cmdline", "environ"):
                with contextlib.suppress(OSError), open(f"/proc/{pid}/{name}", "rb") as f:
                    words += f.read().split(b"\0")
            self.words[pid] = words

    def working_for(self, job_dir: str, job_id: str | None, groups: set[int]) -> int | None:
        """A pid of a process that works for the job (or uses the directory), or None."""
        inside = os.path.realpath(job_dir)
        marker = f"{MARKER}={job_id}".encode() if job_id else None
        path = inside.encode()
        for pid, pgid, sid in self.rows:
            cwd = self.cwd.get(pid, "")
            if pgid in groups or sid in groups or cwd == inside or cwd.startswith(inside + "/"):
                return pid
            if any(w == marker or path in w for w in self.words.get(pid, ())):
                return pid
        return None


def judge(job_dir: str, job_id: str, machine: str, procs: Processes) -> tuple[str | None, float]:
    """(why the job still runs or may, or None; when it ended: its newest file's time)."""
    entries = os.listdir(job_dir)
    newest = os.lstat(job_dir).st_mtime
    for name in entries:
        with contextlib.suppress(OSError):
            newest = max(newest, os.lstat(os.path.join(job_dir, name)).st_mtime)
    groups: set[int] = set()
    elsewhere = []
    recorded = [e for e in entries if e.endswith(PGID_SUFFIX)]
    if not recorded and time.time() - newest < STARTING_S:
        return "no process recorded yet: being started", newest
    for name in (e[: -len(PGID_SUFFIX)] for e in recorded):
        if read_text(os.path.join(job_dir, name + EXIT_SUFFIX)) is not None:
            continue
        on = read_text(os.path.join(job_dir, name + MACHINE_SUFFIX))
        pgid = read_text(os.path.join(job_dir, name + PGID_SUFFIX)) or ""
        if on not in (None, machine):
            elsewhere.append(name)
        elif pgid.isdigit():
            groups.add(int(pgid))
    pid = procs.working_for(job_dir, job_id, groups)
    if pid is not None:
        return f"process {pid} runs for it", newest
    try:
        with open(os.path.join(job_dir, SUPERVISOR_FILE)) as handle:
            final = json.load(handle).get("state") in FINAL_STATES
    except (OSError, ValueError, AttributeError):
        final = False
    if elsewhere and not final:
        return f"{', '.join(sorted(elsewhere))} may run on another host (shared home)", newest
    return None, newest


def size_of(path: str) -> int:
    total = 0
    with contextlib.suppress(OSError):
        total += os.lstat(path).st_size
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def own_dir(path: str) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def tighten(path: str) -> None:
    """Group's and others' bits off what this user owns under ``path`` (links kept)."""
    me = os.geteuid()
    items = [path]
    for root, dirs, files in os.walk(path):
        items += [os.path.join(root, name) for name in dirs + files]
    for item in items:
        with contextlib.suppress(OSError):
            st = os.lstat(item)
            if st.st_uid == me and st.st_mode & 0o077 and not stat.S_ISLNK(st.st_mode):
                os.chmod(item, stat.S_IMODE(st.st_mode) & 0o7700)


def job_ray_dirs(job_dir: str, job_id: str, host: str) -> set[str]:
    """The Ray temp dirs of every host of the job (a shared home holds them all)."""
    hosts = {host}
    path = os.path.join(job_dir, JOB_FILE)
    with contextlib.suppress(OSError, ValueError, AttributeError, TypeError), open(path) as handle:
        hosts.update(str(h) for h in json.load(handle).get("hosts") or ())
    return {ray_dir(job_id, h) for h in hosts}


def orphan_ray_dirs(known: set[str], older_than: float, procs: Processes) -> list[str]:
    """This user's Ray temp dirs of no job directory here, old enough, used by none."""
    found = []
    now = time.time()
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(RAY_TEMP_ROOT)):
            path = os.path.join(RAY_TEMP_ROOT, name)
            if not name.startswith(RAY_PREFIX) or path in known or not own_dir(path):
                continue
            old = now - os.lstat(path).st_mtime >= older_than
            if old and procs.working_for(path, None, set()) is None:
                found.append(path)
    return found


def main() -> None:
    args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    host = str(args.get("host") or "")
    older_than = float(args.get("older_than", 30 * 86400))
    keep = int(args.get("keep", 0))
    dry_run = bool(args.get("dry_run"))
    machine = read_text("/proc/sys/kernel/random/boot_id") or "unknown"
    emit({"program": PROGRAM, "v": VERSION})
    procs = Processes()
    now = time.time()
    ended: list[tuple[float, str, str]] = []  # (ended, job id, job dir)
    known: set[str] = set()  # Ray temp dirs of the job directories found
    seen = set()
    for root in args.get("roots", []):
        root = os.path.expanduser(root)
        with contextlib.suppress(OSError):
            for job_id in sorted(os.listdir(root)):
                job_dir = os.path.join(root, job_id)
                if job_dir in seen or job_id.startswith(".") or not own_dir(job_dir):
                    continue
                seen.add(job_dir)
                known |= job_ray_dirs(job_dir, job_id, host)
                try:
                    why, when = judge(job_dir, job_id, machine, procs)
                except OSError as exc:
                    why, when = f"unreadable: {exc.strerror}", now
                if why is None:
                    ended.append((when, job_id, job_dir))
                else:
                    emit({"job": job_id, "action": "running", "ended": None, "why": why})
    ended.sort(reverse=True)
    freed = removed = 0
    for index, (when, job_id, job_dir) in enumerate(ended):
        ray = ray_dir(job_id, host)
        ray_path = ray if own_dir(ray) else None
        record = {"job": job_id, "ended": when, "ray": ray_path}
        if index < keep or now - when < older_than:
            action = "kept" if index < keep else "recent"
            if not dry_run:
                tighten(job_dir)
            emit(dict(record, action=action, bytes=0, why=None))
            continue
        size = size_of(job_dir) + (size_of(ray_path) if ray_path else 0)
        if not dry_run:
            shutil.rmtree(job_dir, ignore_errors=True)
            if ray_path:
                shutil.rmtree(ray_path, ignore_errors=True)
        freed += size
        removed += 1
        emit(dict(record, action="removed", bytes=size, why=None))
    for path in orphan_ray_dirs(known, older_than, procs):
        size = size_of(path)
        if not dry_run:
            shutil.rmtree(path, ignore_errors=True)
        freed += size
        emit({"job": None, "action": "removed", "ended": None, "bytes": size, "ray": path})
    emit({"done": removed, "bytes": freed, "dry_run": dry_run})
    sys.stdout.flush()


if __name__ == "__main__":
    main()
