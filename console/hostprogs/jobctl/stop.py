"""jobctl's ``stop`` (a part of the job helper, sent to hosts between ``common.py`` and
``program.py``: ``console/jobs/ssh/remote_ops.py`` ``jobctl_source``): SIGTERM every
process group of the job plus every process that carries the job's marker variable
(torchrun puts its workers in sessions of their own) and the groups made inside their
sessions, SIGKILL after the grace period, then report what is left."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

if __name__ != "__main__":  # imported by the console/tests; on a host the source precedes
    from console.hostprogs.jobctl.common import (
        PGID_SUFFIX,
        STOP_REQUESTED,
        SUPERVISOR_PID,
        command_line,
        emit,
        exit_status,
        job_pgids,
        job_pid_alive,
        live_sessions,
        marked_pids,
        private_job_dir,
        read_text,
        recorded_here,
        session_members,
        write_atomic,
    )


def op_stop(args: dict[str, Any]) -> None:
    job_dir = os.path.expanduser(args["job_dir"])
    private_job_dir(job_dir)
    job_id = args["job_id"]
    grace = float(args.get("grace", 10.0))
    names = args.get("names", [])
    if os.path.isdir(job_dir):
        # Processes the console does not know of, but only those started on this
        # machine: another host's pgid (a shared home) is some other group here.
        found = {f[: -len(PGID_SUFFIX)] for f in os.listdir(job_dir) if f.endswith(PGID_SUFFIX)}
        names = sorted(set(names) | {n for n in found if recorded_here(job_dir, n)})
    if os.path.isdir(job_dir):
        # Before any signal: whoever watches the job reads the deaths that follow as a
        # stop, not as a failure.
        write_atomic(os.path.join(job_dir, STOP_REQUESTED), f"{time.time()}\n")
    groups = set(job_pgids(job_dir, names).values())
    me = os.getpgrp()
    groups.discard(me)

    sessions = set(groups)

    def remaining() -> list[int]:
        marked = set(marked_pids(job_id))
        return sorted(
            pid
            for pid, pgid, sid, _state in live_sessions()
            if pgid in groups or pid in marked or sid in sessions
        )

    def signal_all(sig: int) -> int:
        sent = 0
        signalled = set()
        for pgid in sorted(groups):
            try:
                os.killpg(pgid, sig)
                signalled.add(pgid)
                sent += 1
            except (ProcessLookupError, PermissionError):
                pass
        for pid in marked_pids(job_id):
            try:
                pgid = os.getpgid(pid)
                if pgid in signalled:
                    # It had this signal with its group: a second one can land in the
                    # middle of its shutdown (torchrun then hangs joining its log threads
                    # at exit, until the SIGKILL after the grace).
                    continue
                if pgid != me and pgid not in groups:
                    # A marked process leading its own group (torchrun's workers): signal
                    # the whole group so its children go with it.
                    groups.add(pgid)
                    os.killpg(pgid, sig)
                    signalled.add(pgid)
                else:
                    os.kill(pid, sig)
                sent += 1
            except (ProcessLookupError, PermissionError):
                pass
        for pgid in sorted(set(session_members(sessions).values()) - groups - {me}):
            # A group made inside a job process's session (Ray's workers).
            groups.add(pgid)
            try:
                os.killpg(pgid, sig)
                sent += 1
            except (ProcessLookupError, PermissionError):
                pass
        return sent

    signal_all(signal.SIGTERM)
    deadline = time.time() + grace
    left = remaining()
    while left and time.time() < deadline:
        time.sleep(0.05)
        left = remaining()
    killed = 0
    if left:
        killed = signal_all(signal.SIGKILL)
        deadline = time.time() + 3
        while left and time.time() < deadline:
            time.sleep(0.05)
            left = remaining()
    # The supervisor records the stop and leaves once the job's processes are gone.
    pid_text = read_text(os.path.join(job_dir, SUPERVISOR_PID)) or ""
    deadline = time.time() + 5
    while pid_text.isdigit() and job_pid_alive(int(pid_text), job_dir) and time.time() < deadline:
        time.sleep(0.05)
    emit(
        {
            "remaining": [{"pid": pid, "cmd": command_line(pid)} for pid in left],
            "killed": killed,
            "processes": [{"proc": n, "exit": exit_status(job_dir, n)} for n in names],
        }
    )
