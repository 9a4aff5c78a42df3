"""The supervisor's part that watches this host's processes of the job.

Which ended and how (their ``.exit`` files and process groups, as jobctl records them),
the last lines and first error of a failed one, and stopping them all (TERM, then KILL
after the grace). Also the supervisor's file names (a follower's carry its host's name:
hosts that share a home share the job directory; see ``jobctl_common.supervisor_file``).

A part of the supervisor's single source (``supervisor_source.py``): standard library
only, Python >= 3.7, names prefixed ``sv_``/``Sv``/``SV_``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

if __name__ != "__main__":  # imported by the console/tests; on a host the parts precede
    from console.hostprogs.failure_lines import failed_rank, failure_cause
    from console.hostprogs.jobctl.common import (
        exit_status,
        job_pgids,
        marked_pids,
        session_members,
        supervisor_file,
    )

SUPERVISOR_PROGRAM = "supervisor"
SUPERVISOR_VERSION = 1  # of supervisor.json and the wire messages
SV_CONFIG = "supervisor-config.json"
SV_SECRET = "supervisor.secret"
SV_PID = "supervisor.pid"
SV_PORT = "supervisor.port"
SV_STATE = "supervisor.json"
SV_EVENTS = "events.jsonl"
SV_LOG = "supervisor.log"
SV_TAIL_LINES = 15
SV_SEARCHED_BYTES = 64 * 1024  # of each failed process's output, for the first error
SV_FINAL = ("succeeded", "failed", "stopped")
SV_LOST_DIR = "lost-hosts"  # lost-hosts/HOST: the console lost HOST (file holds why)
SV_GPU_EVERY_S = 15.0  # one GPU sample (hang_gpu_sample) this often


def sv_path(job_dir: str, name: str, host: str, leader: bool) -> str:
    """This supervisor's own file ``name`` (see jobctl_common's ``supervisor_file``)."""
    return os.path.join(job_dir, supervisor_file(name, host, leader))


def sv_signal_name(code: int | None) -> str | None:
    """The signal a shell's status 128+N reports (the wrapper records ``$?``)."""
    if code is None or code <= 128 or code > 128 + 64:
        return None
    try:
        return signal.Signals(code - 128).name
    except ValueError:
        return None


def sv_tail(path: str, limit: int) -> list[str]:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            data = handle.read()
    except OSError:
        return []
    lines = data.decode(errors="replace").splitlines()
    return lines[1:] if size > limit and lines else lines


class SvLocal:
    """This host's processes of the job: which ended, how, and stopping them."""

    def __init__(self, job_dir: str, job_id: str, procs: list[dict[str, Any]]) -> None:
        self.job_dir = job_dir
        self.job_id = job_id
        self.procs = {p["name"]: p for p in procs}
        self.pgids = job_pgids(job_dir, list(self.procs))
        self.ended: dict[str, dict[str, Any]] = {}
        self.term_at: float | None = None
        self.kill_at: float | None = None
        self.groups: set = set()
        self.sessions: set = set()  # the recorded groups: each leads a session

    def poll(self, stop_asked_at: float | None) -> list[dict[str, Any]]:
        """Processes found ended since the last poll: a status file, or a vanished group."""
        found = []
        for name in self.procs:
            if name in self.ended:
                continue
            status = exit_status(self.job_dir, name)
            if status is None and self._alive(name):
                continue
            if status is None:
                status = exit_status(self.job_dir, name)  # written as the group ended
            at = time.time()
            with contextlib.suppress(OSError):
                at = os.stat(os.path.join(self.job_dir, name + ".exit")).st_mtime
            end = {
                "name": name,
                "exit_code": status,
                "signal": sv_signal_name(status),
                "at": at,
                "stop_requested": stop_asked_at is not None and at >= stop_asked_at,
                "lines": [],
                "first_error": [],
                "rank": None,
            }
            if status != 0 and not end["stop_requested"] and self.term_at is None:
                end["lines"], end["first_error"], end["rank"] = self._why(name)
            self.ended[name] = end
            found.append(end)
        return found

    def _alive(self, name: str) -> bool:
        pgid = self.pgids.get(name)
        if pgid is None:
            self.pgids.update(job_pgids(self.job_dir, [name]))
            pgid = self.pgids.get(name)
            if pgid is None:
                return False
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def _why(self, name: str) -> tuple[list[str], list[str], int | None]:
        """The failed process's last output lines, the first error before them, and the
        rank its launcher's report names as the first that failed (MPI)."""
        lines: list[str] = []
        cause: list[str] = []
        rank = None
        for path in self.procs[name].get("logs") or []:
            path = os.path.expanduser(path)
            lines += sv_tail(path, 8 * 1024)[-SV_TAIL_LINES:]
            searched = sv_tail(path, SV_SEARCHED_BYTES)
            # torchrun's report names the machine ("localhost"): the job's name for it.
            found = list(failure_cause(searched, host=self.procs[name].get("host")))
            if found and not cause:
                cause = found
            if rank is None:
                rank = failed_rank(searched)
        lines = lines[-2 * SV_TAIL_LINES :]
        if set(cause) <= set(lines):
            cause = []  # the last lines already show it
        return lines, cause, rank

    @property
    def all_ended(self) -> bool:
        return len(self.ended) == len(self.procs)

    def stop(self, grace: float) -> None:
        """TERM every process group of the job here and every marked process (torchrun's
        workers lead sessions of their own); KILL follows in :meth:`tick`."""
        if self.term_at is not None:
            return
        self.term_at = time.time()
        self.kill_at = self.term_at + grace
        self.groups = set(job_pgids(self.job_dir, list(self.procs)).values())
        self.sessions = set(self.groups)  # each process's group leads its own session
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """KILL every process of the job here at once, as a crash would (a drain: a
        torchrun agent that gets TERM closes the whole job's rendezvous on its way out)."""
        now = time.time()
        self.term_at = self.term_at or now
        self.kill_at = None
        self.groups = set(job_pgids(self.job_dir, list(self.procs)).values())
        self.sessions = set(self.groups)
        self._signal(signal.SIGKILL)

    def tick(self) -> None:
        if self.kill_at is not None and time.time() >= self.kill_at:
            self.kill_at = None
            self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        me = os.getpgrp()
        signalled = set()
        for pgid in sorted(self.groups):
            if pgid != me:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, sig)
                    signalled.add(pgid)
        for pid in marked_pids(self.job_id):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                pgid = os.getpgid(pid)
                if pgid in signalled:
                    continue  # once is enough: a second TERM can hang torchrun at exit
                if pgid != me and pgid not in self.groups:
                    self.groups.add(pgid)
                    os.killpg(pgid, sig)
                    signalled.add(pgid)
                else:
                    os.kill(pid, sig)
        for pgid in sorted(set(session_members(self.sessions).values()) - self.groups - {me}):
            # A group made inside a job process's session (Ray's workers).
            self.groups.add(pgid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)

    def leftovers(self) -> list[int]:
        return sorted(set(marked_pids(self.job_id)) | set(session_members(self.sessions)))
