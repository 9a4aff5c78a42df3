"""What the job helper (``jobctl.py``) and the supervisor share: the job directory's
file names, reading and writing its files, and the host's process table.

Sent to hosts ahead of ``jobctl.py`` (``console/jobs/ssh/remote_ops.py`` ``jobctl_source``)
and of the supervisor's parts (``supervisor_source.py``): standard library only, any
Python >= 3.7. The file names (``NAME.pgid``, ``.machine``, ``.exit``, ``.sh``) are
those of ``console/jobs/paths.py``; a contract test keeps them equal.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import sys
from typing import Any

MARKER = "DISTCONSOLE_JOB_ID"
# A process's files in the job directory: NAME + suffix (console/jobs/paths.py's names).
PGID_SUFFIX = ".pgid"
MACHINE_SUFFIX = ".machine"
EXIT_SUFFIX = ".exit"
WRAPPER_SUFFIX = ".sh"
STOP_REQUESTED = "stop-requested"  # a file in the job directory: stop was asked for
# The job's supervisor (supervisor.py) in the job directory: its source, config, secret,
# pid, the leader's port, and the state it records.
SUPERVISOR_SOURCE = "supervisor.py"
SUPERVISOR_CONFIG = "supervisor-config.json"
SUPERVISOR_SECRET = "supervisor.secret"
SUPERVISOR_PID = "supervisor.pid"
SUPERVISOR_PORT = "supervisor.port"
SUPERVISOR_STATE = "supervisor.json"
SUPERVISOR_LOG = "supervisor.log"
FINAL_STATES = ("succeeded", "failed", "stopped")
LOST_HOSTS = "lost-hosts"  # lost-hosts/HOST in a job directory: the console lost HOST
# ended-hosts/HOST.json: the processes of HOST (its supervisor dead) that the console saw end
ENDED_HOSTS = "ended-hosts"
# Everything in a job directory can hold the job's environment, secret or logs: private
# to its user whatever the login umask (files 600, directories and wrappers 700). The
# wrapper gives the program itself the login umask back (USER_UMASK_VAR, octal).
PRIVATE_UMASK = 0o077
USER_UMASK_VAR = "DISTCONSOLE_UMASK"


def supervisor_file(name: str, host: str | None, leader: bool) -> str:
    """A supervisor's file in the job directory: the leader's under the plain name (the
    job's truth, where readers look), a follower's with its host in the name, since hosts
    that share a home (NFS) share the job directory."""
    if leader or not host:
        return name
    stem, dot, ext = name.rpartition(".")
    return f"{stem}.{host}.{ext}" if dot else f"{name}.{host}"


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def read_text(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def write_atomic(path: str, text: str, mode: int = 0o600) -> None:
    # A temporary name of this process's own: hosts that share a home write the same
    # file at once (every host's stop writes stop-requested), and a shared name let one
    # host's rename take the file from under another's chmod.
    tmp = f"{path}.{socket.gethostname()}.{os.getpid()}.tmp"
    with open(tmp, "w") as handle:
        handle.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def tighten(path: str) -> None:
    """Take group's and others' bits off ``path`` and all under it that this user owns
    (a job directory written before files were private, or files a job's program made
    with the login umask). Symlinks are neither followed nor changed."""
    me = os.geteuid()

    def strip(item: str) -> None:
        with contextlib.suppress(OSError):
            st = os.lstat(item)
            if st.st_uid == me and st.st_mode & 0o077 and not stat.S_ISLNK(st.st_mode):
                os.chmod(item, stat.S_IMODE(st.st_mode) & 0o7700)

    strip(path)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            strip(os.path.join(root, name))


def private_job_dir(job_dir: str) -> None:
    """The job directory and the jobs folder that holds it made private (700), and what
    the job directory holds (the next time distconsole touches a job written before).
    A jobs folder others may write in (a team's shared work_dir) is left as it is."""
    if not os.path.isdir(job_dir):
        return
    parent = os.path.dirname(os.path.normpath(job_dir))
    with contextlib.suppress(OSError):
        st = os.stat(parent)
        if st.st_uid == os.geteuid() and st.st_mode & 0o077 and not st.st_mode & 0o022:
            os.chmod(parent, stat.S_IMODE(st.st_mode) & 0o7700)
    tighten(job_dir)


def live_processes() -> list[tuple[int, int, str]]:
    """(pid, pgid, state) of every process except zombies (they are already dead)."""
    return [(pid, pgid, state) for pid, pgid, _sid, state in live_sessions()]


def live_sessions() -> list[tuple[int, int, int, str]]:
    """(pid, pgid, session id, state) of every process except zombies."""
    return [(pid, pgid, sid, state) for pid, _ppid, pgid, sid, state in live_stats()]


def live_stats() -> list[tuple[int, int, int, int, str]]:
    """(pid, parent pid, pgid, session id, state) of every process except zombies."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = read_text("/proc/" + entry + "/stat")
        if not stat:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) < 4 or fields[0] in ("Z", "X"):
            continue
        found.append((int(entry), int(fields[1]), int(fields[2]), int(fields[3]), fields[0]))
    return found


def session_members(sessions: set[int]) -> dict[int, int]:
    """pid -> pgid of the live processes in one of ``sessions``: each job process starts
    a session of its own (setsid), so its recorded pgid is also its session id. A process
    that moved to a group of its own and renamed itself with a blank environment (Ray's
    workers) is found by neither the group nor the marker, but stays in the session."""
    me = os.getpid()
    return {pid: pgid for pid, pgid, sid, _s in live_sessions() if sid in sessions and pid != me}


def marked_pids(job_id: str) -> list[int]:
    """Processes (readable by this user) whose environment carries the job's marker."""
    wanted = (MARKER + "=" + job_id).encode()
    me = os.getpid()
    pids = []
    for pid, _pgid, _state in live_processes():
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                entries = handle.read().split(b"\0")
        except OSError:
            continue
        if wanted in entries:
            pids.append(pid)
    return pids


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:200]


def this_machine() -> str:
    """This host's boot id: process group ids mean something only on the machine (and
    boot) that recorded them, and a shared (NFS) home shows every host's files."""
    return read_text("/proc/sys/kernel/random/boot_id") or "unknown"


def recorded_here(job_dir: str, name: str) -> bool:
    machine = read_text(os.path.join(job_dir, name + MACHINE_SUFFIX))
    return machine is None or machine == this_machine()


def job_pgids(job_dir: str, names: list[str]) -> dict[str, int]:
    found = {}
    for name in names:
        text = read_text(os.path.join(job_dir, name + PGID_SUFFIX))
        if text and text.isdigit():
            found[name] = int(text)
    return found


def exit_status(job_dir: str, name: str) -> int | None:
    text = read_text(os.path.join(job_dir, name + EXIT_SUFFIX))
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (its parent has not reaped it yet) is dead too.
    stat = read_text(f"/proc/{pid}/stat") or ""
    return stat[stat.rfind(")") + 2 :][:1] not in ("Z", "X")


def job_pid_alive(pid: int, job_dir: str) -> bool:
    """``pid`` (from a pid file of the job) is alive and is still the job's: its
    command line (``python3 JOB_DIR/supervisor.py JOB_DIR HOST``) carries the job's id,
    the job directory's name. A host that rebooted or was killed whole leaves a stale
    pid that another process, another user's too, may carry now (as jobs_scan checks)."""
    if not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read(1 << 16)
    except OSError:
        return True  # not ours to read (hidepid): its pid file said so, take it
    job_id = os.path.basename(os.path.normpath(os.path.expanduser(job_dir)))
    return bool(job_id) and job_id.encode(errors="replace") in argv


def supervisor_record(job_dir: str, host: str | None = None) -> dict[str, Any] | None:
    """What ``host``'s supervisor last recorded, with ``alive``: None if it has none.
    A follower's files carry its host's name; the leader's (and, without ``host``, the
    only one there) have the plain names. ``alive`` only when the pid is the job's
    (:func:`job_pid_alive`)."""
    names = [supervisor_file(SUPERVISOR_PID, host, False), SUPERVISOR_PID]
    if host is None:
        with contextlib.suppress(OSError):
            names += sorted(
                n for n in os.listdir(job_dir) if n.startswith("supervisor.") and n.endswith(".pid")
            )
    for pid_name in dict.fromkeys(names):
        pid_text = read_text(os.path.join(job_dir, pid_name))
        if pid_text is not None:
            break
    else:
        return None
    state_name = pid_name[: -len(".pid")]  # supervisor[.HOST]
    text = read_text(os.path.join(job_dir, state_name + ".json"))
    try:
        record = json.loads(text) if text else {}
    except ValueError:
        record = {}
    if not isinstance(record, dict):
        record = {}
    record["alive"] = pid_text.isdigit() and job_pid_alive(int(pid_text), job_dir)
    return record


def process_report(job_dir: str, name: str, pgid: int | None, alive: set[int]) -> dict[str, Any]:
    report = _process_state(job_dir, name, pgid, alive)
    if report.get("exit") is not None:
        # When it ended (the wrapper writes the file as its process exits): with several
        # failures, the earliest is the cause and the others its consequences.
        with contextlib.suppress(OSError):
            report["ended_at"] = os.stat(os.path.join(job_dir, name + EXIT_SUFFIX)).st_mtime
    if not report.get("running"):
        try:
            asked = os.stat(os.path.join(job_dir, STOP_REQUESTED)).st_mtime
        except OSError:
            asked = None
        # Only what ended after the stop was asked ended because of it; a crash before
        # it stays a failure even when it is reported later.
        ended = report.get("ended_at")
        if asked is not None and (ended is None or ended >= asked):
            report["stop_requested"] = True
    return report


def _process_state(job_dir: str, name: str, pgid: int | None, alive: set[int]) -> dict[str, Any]:
    status = exit_status(job_dir, name)
    if status is not None:
        return {"proc": name, "exit": status, "pgid": pgid}
    if pgid is None:
        return {"proc": name, "missing": True}
    if pgid in alive:
        return {"proc": name, "running": True, "pgid": pgid}
    # The group ended between reading the exit file and the process table.
    status = exit_status(job_dir, name)
    return {"proc": name, "exit": status, "pgid": pgid, "gone": status is None}
