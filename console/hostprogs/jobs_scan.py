"""The jobs scan: which jobs a host holds, read from its job directories.

Sent on stdin to ``python3 -u - ARGS_JSON`` (no setup line: standard library only,
Python >= 3.7). ``ARGS_JSON``: ``{"roots": [job root, ...], "known": [job id, ...],
"host": the inventory's name of this host}`` (a follower's supervisor files carry its
host's name, ``supervisor.HOST.json``: hosts that share a home share job directories).
Every directory under each root (``<work_dir>/.distconsole/jobs``) is one job; for each
the scan prints one JSON line::

    {"job": ID, "dir": PATH, "document": job.json or null (its plan left out when the
     id is "known", i.e. the console's history already holds it), "supervisor":
     supervisor.json or null, "supervisor_pid": int|null, "supervisor_alive": bool|null,
     "stop_requested": epoch|null, "processes": {NAME: {"pgid", "alive", "exit"}},
     "alive": N, "modified": epoch, "problem": why job.json was left out (not JSON, a
     field of the wrong type, ...) or null}

after its versioned hello, and ``{"done": N}`` last. ``supervisor_alive`` is null when
the job has no ``supervisor.pid``. Nothing is written on the host, but a job directory
(or the jobs folder) an older distconsole left open to others is made 700 (its contents
are tightened by the next jobctl or gc run). Process groups are read only when recorded
on this machine (a shared home shows other hosts' files).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

PROGRAM = "jobs_scan"
VERSION = 1
# Names in a job directory (console/jobs/paths.py, and the issue-12 contract).
JOB_FILE = "job.json"
SUPERVISOR_FILE = "supervisor.json"
SUPERVISOR_PID = "supervisor.pid"
STOP_REQUESTED = "stop-requested"
PGID_SUFFIX = ".pgid"
MACHINE_SUFFIX = ".machine"
EXIT_SUFFIX = ".exit"
MAX_DOCUMENT_BYTES = 16 << 20  # a job.json larger than this is not read


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")


def read_text(path: str, limit: int = 1 << 16) -> str | None:
    try:
        # UTF-8 with replacement whatever the host's locale: a byte never fails a read.
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(limit).strip()
    except OSError:
        return None


def read_json(path: str, limit: int = 1 << 20) -> Any | None:
    text = read_text(path, limit)
    if not text:
        return None
    try:
        return text_only(json.loads(text))
    except ValueError:
        return None


def text_only(value: Any) -> Any:
    """``value`` with each lone surrogate (a ``"\\udc80"`` escape: valid JSON, not text,
    which no UTF-8 writer of the console takes) read as "?"."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
        return value
    except UnicodeEncodeError:
        text = json.dumps(value, ensure_ascii=False).encode("utf-8", "replace")
        return json.loads(text.decode("utf-8"))


# job.json's fields the console reads, and their JSON types (a wrong one: not read).
DOCUMENT_TYPES = (
    ("id", (str,)),
    ("name", (str,)),
    ("kind", (str,)),
    ("hosts", (list,)),
    ("created_at", (int, float)),
    ("spec", (dict,)),
    ("plan", (dict,)),
)


def read_document(path: str) -> tuple[Any | None, str | None]:
    """A job.json and why it was left out (None: it was not): a file that is not a JSON
    object, holds text that is not UTF-8 (a lone surrogate), or gives a field the wrong
    type is not passed on: the console names it and lists the other jobs."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_DOCUMENT_BYTES + 1)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, "not readable (" + str(exc.strerror or exc) + ")"
    if len(data) > MAX_DOCUMENT_BYTES:
        return None, "larger than " + str(MAX_DOCUMENT_BYTES >> 20) + " MiB"
    text = data.decode("utf-8", "replace").strip()
    if not text:
        return None, None  # being written (jobctl start), or emptied: nothing to read
    try:
        document = json.loads(text)
    except ValueError as exc:
        return None, "not JSON (" + str(exc)[:120] + ")"
    if not isinstance(document, dict):
        return None, "not a JSON object"
    try:
        json.dumps(document, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return None, "holds text that is not UTF-8 (a lone surrogate escape)"
    for key, types in DOCUMENT_TYPES:
        value = document.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, types)):
            wanted = types[0].__name__
            return None, '"' + key + '" is a ' + type(value).__name__ + ", not a " + wanted
    if not all(isinstance(h, str) for h in document.get("hosts") or ()):
        return None, '"hosts" holds a value that is not a string'
    return document, None


def make_private(path: str) -> None:
    """``path`` 700 if this user's and open to others (not a folder others may write in:
    a team's shared jobs folder)."""
    try:
        st = os.stat(path)
        if st.st_uid == os.geteuid() and st.st_mode & 0o077 and not st.st_mode & 0o022:
            os.chmod(path, st.st_mode & 0o7700)
    except OSError:
        pass


def live_groups() -> set[int]:
    """Process groups with a live (not zombie) member."""
    groups = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = read_text("/proc/" + entry + "/stat")
        if not stat:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 3 and fields[0] not in ("Z", "X"):
            groups.add(int(fields[2]))
    return groups


def pid_alive(pid: int) -> bool:
    stat = read_text("/proc/" + str(pid) + "/stat")
    if not stat:
        return False
    fields = stat[stat.rfind(")") + 2 :].split()
    return bool(fields) and fields[0] not in ("Z", "X")


def supervisor_alive(pid: int, job_id: str) -> bool:
    """The job's supervisor (``python3 JOB_DIR/supervisor.py JOB_DIR HOST``) runs as
    ``pid``: a host that rebooted or was killed whole leaves a stale pid another process
    may carry now, which must not make a dead job look supervised."""
    if not pid_alive(pid):
        return False
    try:
        with open("/proc/" + str(pid) + "/cmdline", "rb") as handle:
            argv = handle.read(1 << 16).decode(errors="replace")
    except OSError:
        return True  # not ours to read: its pid file said so, take it
    return job_id in argv


def processes(job_dir: str, names: list[str], machine: str, groups: set[int]) -> dict[str, Any]:
    found = {}
    for name in names:
        pgid_text = read_text(os.path.join(job_dir, name + PGID_SUFFIX))
        pgid = int(pgid_text) if pgid_text and pgid_text.isascii() and pgid_text.isdigit() else None
        recorded_on = read_text(os.path.join(job_dir, name + MACHINE_SUFFIX))
        here = recorded_on is None or recorded_on == machine
        exit_text = read_text(os.path.join(job_dir, name + EXIT_SUFFIX))
        try:
            exit_status = int(exit_text) if exit_text is not None else None
        except ValueError:
            exit_status = None
        alive = here and exit_status is None and pgid is not None and pgid in groups
        found[name] = {"pgid": pgid, "alive": alive, "exit": exit_status, "here": here}
    return found


def supervisor_names(job_dir: str, host: str | None) -> tuple[str, str]:
    """(record, pid) file names of ``host``'s supervisor: a follower's carry its host's
    name (hosts that share a home share the job directory), the leader's are plain."""
    if host and os.path.exists(os.path.join(job_dir, f"supervisor.{host}.pid")):
        return f"supervisor.{host}.json", f"supervisor.{host}.pid"
    if host is None and not os.path.exists(os.path.join(job_dir, SUPERVISOR_PID)):
        try:
            named = sorted(
                n for n in os.listdir(job_dir) if n.startswith("supervisor.") and n.endswith(".pid")
            )
        except OSError:
            named = []
        if named:
            return named[0][: -len(".pid")] + ".json", named[0]
    return SUPERVISOR_FILE, SUPERVISOR_PID


def modified_at(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def scan_job(
    job_dir: str,
    job_id: str,
    known: set[str],
    machine: str,
    groups: set[int],
    host: str | None = None,
) -> dict[str, Any]:
    document, problem = read_document(os.path.join(job_dir, JOB_FILE))
    if isinstance(document, dict) and job_id in known:
        document.pop("plan", None)  # the console has it; a big plan costs transfer
    record_name, pid_name = supervisor_names(job_dir, host)
    pid_text = read_text(os.path.join(job_dir, pid_name))
    supervisor_pid = (
        int(pid_text) if pid_text and pid_text.isascii() and pid_text.isdigit() else None
    )
    try:
        entries = os.listdir(job_dir)
    except OSError:
        entries = []
    names = sorted(e[: -len(PGID_SUFFIX)] for e in entries if e.endswith(PGID_SUFFIX))
    procs = processes(job_dir, names, machine, groups)
    return {
        "job": job_id,
        "dir": job_dir,
        "document": document if isinstance(document, dict) else None,
        "supervisor": read_json(os.path.join(job_dir, record_name)),
        "supervisor_pid": supervisor_pid,
        "supervisor_alive": None
        if supervisor_pid is None
        else supervisor_alive(supervisor_pid, job_id),
        # When someone asked for the job to stop (``jobctl stop``), or null.
        "stop_requested": modified_at(os.path.join(job_dir, STOP_REQUESTED)),
        "processes": procs,
        "alive": sum(1 for p in procs.values() if p["alive"]),
        "modified": modified_at(job_dir),
        "problem": problem,
    }


def main() -> None:
    args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    known = set(args.get("known", []))
    machine = read_text("/proc/sys/kernel/random/boot_id") or "unknown"
    emit({"program": PROGRAM, "v": VERSION})
    groups = live_groups()
    count = 0
    seen = set()
    for root in args.get("roots", []):
        root = os.path.expanduser(root)
        try:
            entries = sorted(os.listdir(root))
        except OSError:
            continue
        make_private(root)
        for job_id in entries:
            job_dir = os.path.join(root, job_id)
            if job_dir in seen or not os.path.isdir(job_dir):
                continue
            seen.add(job_dir)
            make_private(job_dir)
            emit(scan_job(job_dir, job_id, known, machine, groups, args.get("host")))
            count += 1
    emit({"done": count})
    sys.stdout.flush()


if __name__ == "__main__":
    main()
