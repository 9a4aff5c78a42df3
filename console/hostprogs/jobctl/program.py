"""The job helper the runner sends to a host (``python3 -u -c <this file> OP JSON``).

Standard library only and runnable by any Python >= 3.7 on the host, because nothing of
distconsole is installed there. It travels as one source with ``jobctl_common.py`` (the
job directory's files and the process table, which the supervisor shares) ahead of it:

- ``start``: create the job directory, write uploads and per-process wrappers, start each
  wrapper in its own session (pgid == wrapper pid) and record the pgid; the payload
  comes on stdin (it can be larger than one argument may be).
- ``watch``: long-lived; print one JSON line per process when it is running and when it
  has ended (its ``.exit`` file, or its group vanished without one). Exits when every
  process has ended or its stdin reaches EOF (the console went away).
- ``inspect``: one-shot version of ``watch`` for re-attaching.
- ``stop``: SIGTERM every process group of the job plus every process that carries the
  job's marker variable (torchrun puts its workers in sessions of their own), SIGKILL
  after the grace period, then report what is left (``stop.py``, sent between
  ``common.py`` and this file).
- ``free-port``: print a TCP port nobody listens on.

Every run first prints its hello, ``{"program": "jobctl", "v": VERSION}``, then one JSON
line per record.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import selectors
import shutil
import socket
import subprocess
import sys
import time
from typing import Any

if __name__ != "__main__":  # imported by the console/tests; on a host the source precedes
    from console.hostprogs.jobctl.common import (
        ENDED_HOSTS,
        FINAL_STATES,
        LOST_HOSTS,
        MACHINE_SUFFIX,
        PGID_SUFFIX,
        PRIVATE_UMASK,
        SUPERVISOR_CONFIG,
        SUPERVISOR_LOG,
        SUPERVISOR_PID,
        SUPERVISOR_PORT,
        SUPERVISOR_SECRET,
        SUPERVISOR_SOURCE,
        USER_UMASK_VAR,
        WRAPPER_SUFFIX,
        emit,
        job_pgids,
        live_processes,
        marked_pids,
        private_job_dir,
        process_report,
        read_text,
        supervisor_file,
        supervisor_record,
        this_machine,
        write_atomic,
    )
    from console.hostprogs.jobctl.stop import op_stop

PROGRAM = "jobctl"
VERSION = 1  # of its records
FREE_PORT_TRIES = 64  # bases tried for free-port's span
LOGIN_UMASK = 0o022  # the umask this run was started with (main() sets it)


def op_start(args: dict[str, Any]) -> None:
    payload = json.loads(sys.stdin.read())
    job_dir = os.path.expanduser(payload["job_dir"])
    os.makedirs(job_dir, exist_ok=True)
    private_job_dir(job_dir)
    for upload in payload.get("uploads", []):
        path = os.path.expanduser(upload["path"])
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        # Hosts sharing a home write the same path at once, while ranks may already
        # read it: a private temporary name, then one atomic rename.
        tmp = f"{path}.{socket.gethostname()}.{os.getpid()}.tmp"
        with open(tmp, "wb") as handle:
            handle.write(base64.b64decode(upload["data"]))
        os.chmod(tmp, int(upload.get("mode", 0o600)) & 0o700)
        os.replace(tmp, path)
    for directory in payload.get("dirs", []):
        os.makedirs(os.path.expanduser(directory), exist_ok=True)
    shell = shutil.which("bash") or "/bin/sh"
    # The wrapper opens the job's files private (this umask), then gives the program
    # the login umask back: what it writes elsewhere (checkpoints) is the user's affair.
    env = dict(os.environ, **{USER_UMASK_VAR: f"{LOGIN_UMASK:04o}"})
    pgids = {}
    for proc in payload["processes"]:
        name = proc["name"]
        wrapper = os.path.join(job_dir, name + WRAPPER_SUFFIX)
        write_atomic(wrapper, proc["script"], 0o700)
        child = subprocess.Popen(
            [shell, wrapper],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=job_dir,
            env=env,
            close_fds=True,
            start_new_session=True,
        )
        # The wrapper leads its own session, so its pid is the group every
        # process it starts (unless one starts a session of its own) belongs to.
        write_atomic(os.path.join(job_dir, name + MACHINE_SUFFIX), this_machine() + "\n")
        write_atomic(os.path.join(job_dir, name + PGID_SUFFIX), f"{child.pid}\n")
        pgids[name] = child.pid
    result: dict[str, Any] = {"pgids": pgids, "job_dir": job_dir}
    if payload.get("supervisor"):
        result["supervisor"] = start_supervisor(job_dir, payload["supervisor"])
    emit(result)


def start_supervisor(job_dir: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Start the job's supervisor detached (its own session: the ssh session ending does
    not reach it, and it is no process's parent); the leader's port once it listens."""
    host = str(spec["config"]["host"])
    leader = host == spec["config"]["leader"]

    def mine(name: str) -> str:
        return os.path.join(job_dir, supervisor_file(name, host, leader))

    write_atomic(mine(SUPERVISOR_SECRET), spec["secret"] + "\n", 0o600)
    write_atomic(mine(SUPERVISOR_CONFIG), json.dumps(spec["config"]), 0o600)
    write_atomic(mine(SUPERVISOR_SOURCE), spec["source"], 0o600)
    if leader:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(job_dir, SUPERVISOR_PORT))
    with open(mine(SUPERVISOR_LOG), "ab") as log:
        child = subprocess.Popen(
            [sys.executable, mine(SUPERVISOR_SOURCE), job_dir, host],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd=job_dir,
            close_fds=True,
            start_new_session=True,
        )
    write_atomic(mine(SUPERVISOR_PID), f"{child.pid}\n")
    started: dict[str, Any] = {"pid": child.pid}
    if leader:
        deadline = time.time() + 15
        while time.time() < deadline and child.poll() is None:
            port = read_text(os.path.join(job_dir, SUPERVISOR_PORT))
            if port and port.isdigit():
                started["port"] = int(port)
                break
            time.sleep(0.02)
        if "port" not in started:
            log_text = read_text(mine(SUPERVISOR_LOG)) or ""
            started["error"] = "the supervisor did not listen: " + log_text[-500:]
    return started


def op_inspect(args: dict[str, Any]) -> None:
    job_dir = os.path.expanduser(args["job_dir"])
    private_job_dir(job_dir)
    names = args["names"]
    pgids = job_pgids(job_dir, names)
    alive = {pgid for _pid, pgid, _state in live_processes()}
    reports = [process_report(job_dir, n, pgids.get(n), alive) for n in names]
    emit(
        {
            "processes": reports,
            "marked": len(marked_pids(args["job_id"])),
            "supervisor": supervisor_record(job_dir, args.get("host")),
        }
    )


_STDIN_WAIT: list[selectors.BaseSelector] = []  # one selector for stdin, made once


def stdin_closed(timeout: float) -> bool:
    """Sleep up to ``timeout``; True when stdin reached EOF (the console went away).
    Waits with ``selectors`` (epoll), not ``select()``, which fails on a descriptor at
    or above 1024. A stdin that is not open (started with it closed: no console reads
    this), or one epoll cannot wait on (a regular file, ``/dev/null``, read at once to
    its end), counts as closed."""
    try:
        fd = sys.stdin.fileno()
        if not _STDIN_WAIT:
            waiter = selectors.DefaultSelector()
            waiter.register(fd, selectors.EVENT_READ)
            _STDIN_WAIT.append(waiter)
        ready = _STDIN_WAIT[0].select(timeout)
        return bool(ready) and not os.read(fd, 4096)
    except (AttributeError, ValueError, OSError):
        return True


def op_watch(args: dict[str, Any]) -> None:
    job_dir = os.path.expanduser(args["job_dir"])
    private_job_dir(job_dir)
    interval = float(args.get("interval", 0.2))
    pending = list(args["names"])
    running: set[str] = set()
    last = time.time()
    missing_since: dict[str, float] = {}
    shown: Any = None

    def supervised() -> bool:
        """Report what the supervisor records when it changes; True while it runs on."""
        nonlocal shown, last
        record = supervisor_record(job_dir, args.get("host"))
        if record is None:
            return False
        summary = {k: v for k, v in record.items() if k not in ("heartbeat", "pid")}
        if summary != shown:
            shown = summary
            emit({"supervisor": record})
            last = time.time()
        return bool(record["alive"]) and record.get("state") not in FINAL_STATES

    while True:
        supervisor_runs = supervised()
        if not pending and not supervisor_runs:
            break
        pgids = job_pgids(job_dir, pending)
        alive = {pgid for _pid, pgid, _state in live_processes()}
        for name in list(pending):
            report = process_report(job_dir, name, pgids.get(name), alive)
            if report.get("running"):
                if name not in running:
                    running.add(name)
                    emit(report)
                continue
            if report.get("missing"):
                # The start may still be writing the pgid file; give it a moment.
                first = missing_since.setdefault(name, time.time())
                if time.time() - first < 5:
                    continue
            emit(report)
            pending.remove(name)
            last = time.time()
        if time.time() - last > 2:
            emit({"beat": time.time()})  # a dead channel makes this write fail
            last = time.time()
        if stdin_closed(interval):
            return
    emit({"done": True})


def op_free_port(args: dict[str, Any]) -> None:
    """A port P nobody listens on, with ``span`` ports P..P+span-1 all free (a Ray job
    uses P to P+3+hosts; ``plan_ray``)."""
    span = max(1, int(args.get("span") or 1))
    for _attempt in range(FREE_PORT_TRIES):
        with contextlib.ExitStack() as held:
            first = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            first.bind(("", 0))
            base = first.getsockname()[1]
            if base + span - 1 <= 65535 and all(
                _port_free(held, port) for port in range(base + 1, base + span)
            ):
                emit({"port": base, "span": span})
                return
    raise RuntimeError(f"free-port: no {span} free ports in a row after {FREE_PORT_TRIES} tries")


def _port_free(held: contextlib.ExitStack, port: int) -> bool:
    """Bind ``port`` (kept bound until the check ends, so the range is free at once)."""
    sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    try:
        sock.bind(("", port))
    except OSError:
        return False
    return True


def op_host_lost(args: dict[str, Any]) -> None:
    """The console lost ``host`` (its ssh connection dropped and it answers no more):
    a note the supervisors here read, so a host whose supervisor's connection closed
    (which alone reads unsupervised) counts as lost (supervisor.py's peers)."""
    host = _host_name(args, "host-lost")
    notes = os.path.join(os.path.expanduser(args["job_dir"]), LOST_HOSTS)
    os.makedirs(notes, exist_ok=True)
    write_atomic(os.path.join(notes, host), str(args.get("why") or "") + "\n")
    emit({"noted": host})


def op_host_ended(args: dict[str, Any]) -> None:
    """Processes of ``host`` the console saw end while that host's supervisor was dead:
    the leader cannot see them and would wait on them for ever. The note holds every one
    seen so far (``{"name", "exit_code", "at", "stop_requested"}`` each); the leader's
    supervisor takes those it did not know ended (supervisor_peers.py)."""
    host = _host_name(args, "host-ended")
    ends = [
        {
            "name": str(end["name"]),
            "exit_code": end.get("exit_code") if isinstance(end.get("exit_code"), int) else None,
            "at": float(end.get("at") or time.time()),
            "stop_requested": bool(end.get("stop_requested")),
        }
        for end in args.get("ends") or ()
    ]
    notes = os.path.join(os.path.expanduser(args["job_dir"]), ENDED_HOSTS)
    os.makedirs(notes, exist_ok=True)
    write_atomic(os.path.join(notes, host + ".json"), json.dumps(ends))
    emit({"noted": host, "ends": len(ends)})


def _host_name(args: dict[str, Any], op: str) -> str:
    host = str(args["host"])
    if not host or "/" in host or host.startswith("."):
        raise ValueError(f"{op}: not a host name: {host!r}")
    return host


OPS = {
    "start": op_start,
    "host-ended": op_host_ended,
    "host-lost": op_host_lost,
    "watch": op_watch,
    "inspect": op_inspect,
    "stop": op_stop,
    "free-port": op_free_port,
}


def main() -> None:
    global LOGIN_UMASK
    # Whatever it writes (the job directory, its files, the supervisor's) is private.
    LOGIN_UMASK = os.umask(PRIVATE_UMASK)
    op = sys.argv[1]
    args = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    try:
        emit({"program": PROGRAM, "v": VERSION})
        OPS[op](args)
    except BrokenPipeError:
        # The console closed the channel; nothing is left to tell.
        os._exit(0)


if __name__ == "__main__":
    main()
