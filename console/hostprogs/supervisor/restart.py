"""The supervisor's part that restarts: ``--max-restarts N`` through each engine's own way.

- MPI/Horovod: the launcher host's supervisor re-runs the launcher's wrapper (mpirun, or
  horovodrun) when it fails, up to N times; PS: a failed worker is re-run in place by
  its host's supervisor. The policy (``JobPolicy.restart``) says whether; this part
  starts the wrapper again (its own session, ``DISTCONSOLE_RESTART_COUNT`` set), records
  the event and tells the leader, whose policy feeds no end for it.
- DDP: torchrun restarts its own workers (``--max-restarts``, c10d rendezvous) and exits
  only when it gives up, which the policy then takes as any failure (fail-fast). Each
  restart is seen here: torchrun makes ``attempt_N`` under its log directory when it
  restarts a failed worker group, and its output names the worker that failed
  (``failed (exitcode: X) local_rank: L``).

Every restart is an event (``restarted``: host, process, count, cause) here and on the
leader, whose ``supervisor.json`` carries the job's ``restarts``.

A part of the supervisor's single source (``supervisor/source.py``): standard library
only, Python >= 3.7, names prefixed ``sv_``/``Sv``/``SV_``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import signal
import subprocess
import time
from typing import TYPE_CHECKING, Any

if __name__ != "__main__":  # imported by the console/tests; on a host the parts precede
    from console.hostprogs.jobctl.common import (
        EXIT_SUFFIX,
        PGID_SUFFIX,
        WRAPPER_SUFFIX,
        write_atomic,
    )
    from console.hostprogs.supervisor.local import sv_tail
    from console.hostprogs.supervisor.policy import ProcessEnded

SV_RESTART_VAR = "DISTCONSOLE_RESTART_COUNT"
SV_CAUSE_WAIT_S = 5.0  # how long a torchrun restart waits for its cause to be logged
SV_TORCHRUN_LOGS = "torchrun"  # the job directory's torchrun --log-dir (jobs/paths.py)
SV_TORCHRUN_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")
# Horovod elastic (jobs/plan/horovod_elastic.py): horovodrun --log-level INFO names each
# host it drops for a failed worker, and its output each worker's end.
SV_HOROVOD_ROLE = "horovodrun"
SV_HOROVOD_DROPPED = re.compile(r"blacklist failing host: (\S+)")
SV_HOROVOD_EXIT = re.compile(r"Process (\d+) exit with status code (-?\d+)")


def sv_horovod_resets(job_dir: str, name: str, skip: Any = ()) -> tuple[int, dict[str, Any]]:
    """How many times Horovod elastic dropped a host for a failed worker (each is a
    restart: the host's worker is started again after its cooldown), but hosts in
    ``skip`` (lost: elastic.py), and the last failed worker's rank and exit status."""
    lines: list[str] = []
    for suffix in (".err", ".out"):
        lines += sv_tail(os.path.join(job_dir, name + suffix), 256 * 1024)
    dropped = [m.group(1) for m in map(SV_HOROVOD_DROPPED.search, lines) if m]
    dropped = [host for host in dropped if host not in skip]
    cause: dict[str, Any] = {"horovod_host": dropped[-1]} if dropped else {}
    for match in map(SV_HOROVOD_EXIT.search, reversed(lines)):
        if match and match.group(2) != "0":
            cause.update(rank=int(match.group(1)), exit_code=int(match.group(2)))
            break
    return len(dropped), cause


def sv_torchrun_attempt(job_dir: str, name: str) -> int:
    """The highest ``attempt_N`` torchrun ``name`` made under its log directory
    (``torchrun/NAME/RUN/``, jobs/plan/ddp.py): its restarts of a failed worker group."""
    found = 0
    for path in glob.glob(os.path.join(job_dir, SV_TORCHRUN_LOGS, name, "*", "attempt_*")):
        with contextlib.suppress(ValueError):
            found = max(found, int(path.rsplit("_", 1)[1]))
    return found


def sv_torchrun_failure(lines: list[str]) -> dict[str, Any]:
    """The last worker failure torchrun reported in ``lines``: exit status, local rank,
    and the signal's name where torchrun's status is negative (``exitcode: -6``)."""
    for line in reversed(lines):
        match = SV_TORCHRUN_FAILED.search(line)
        if match:
            code = int(match.group(1))
            found: dict[str, Any] = {"exit_code": code, "local_rank": int(match.group(2))}
            if code < 0:
                with contextlib.suppress(ValueError):
                    found["signal"] = signal.Signals(-code).name
            return found
    return {}


def sv_start_wrapper(job_dir: str, name: str, count: int) -> subprocess.Popen[bytes]:
    """Run the process's wrapper again, as ``jobctl start`` did (its own session, its
    group recorded), with the restart's number in its environment."""
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(job_dir, name + EXIT_SUFFIX))
    env = dict(os.environ)
    env[SV_RESTART_VAR] = str(count)
    child = subprocess.Popen(
        [shutil.which("bash") or "/bin/sh", os.path.join(job_dir, name + WRAPPER_SUFFIX)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=job_dir,
        env=env,
        close_fds=True,
        start_new_session=True,
    )
    write_atomic(os.path.join(job_dir, name + PGID_SUFFIX), f"{child.pid}\n")
    return child


def sv_restart_reason(count: int, cause: dict[str, Any]) -> str:
    """``restart 1: rank 1 (torchrun-0) exit status 3``: a notification's reason."""
    who = cause.get("process") or "?"
    if isinstance(cause.get("rank"), int):
        who = f"rank {cause['rank']} ({who})"
    how = cause.get("signal") or (
        f"exit status {cause['exit_code']}" if cause.get("exit_code") is not None else "ended"
    )
    return f"restart {count}: {who} {how}"


class SvRestarts:
    """Mixed into the supervisor: restarts in place, torchrun's restarts, their events."""

    job_dir: str
    host: str
    is_leader: bool
    cfg: dict[str, Any]
    policy: Any
    local: Any
    dirty: bool
    remote_verdict: dict[str, Any] | None  # a follower's: the leader's stop or final word
    notifier: Any  # the leader's (notify.py): --notify-on restarted

    def init_restarts(self) -> None:
        self.restarted_children: list[subprocess.Popen[bytes]] = []
        self.torchrun_seen: dict[tuple[str, int], float] = {}
        self.torchrun_attempts: dict[str, int] = {}  # ddp: process -> highest attempt_N
        self.last_restart: dict[str, Any] | None = None  # its cause, for supervisor.json

    if TYPE_CHECKING:  # provided by the supervisor and its peers part (after this in the MRO)

        def event(self, event: str, **details: Any) -> None: ...
        def send_leader(self, message: dict[str, Any]) -> None: ...
        def horovod_dropped(self) -> set: ...  # elastic.py

    def restart_in_place(self, end: dict[str, Any]) -> bool:
        """True when the ended process ``end`` was restarted (feed no end for it)."""
        if self.local.term_at is not None or self.remote_verdict is not None:
            return False  # this host is stopping (the leader's order, or its own)
        report = ProcessEnded(
            self.host,
            str(end["name"]),
            end.get("exit_code"),
            float(end.get("at") or time.time()),
            end.get("signal"),
            bool(end.get("stop_requested")),
        )
        count = self.policy.restart(report)
        if not count:
            return False
        name = str(end["name"])
        try:
            self.restarted_children.append(sv_start_wrapper(self.job_dir, name, count))
        except OSError as exc:  # its wrapper gone, no fork: the end stands
            self.policy.restarts[(self.host, name)] = count - 1
            self.event("restart-failed", process=name, count=count, why=repr(exc))
            return False
        self.local.ended.pop(name, None)
        self.local.pgids.pop(name, None)  # read again from the new .pgid file
        proc = self.policy.process(self.host, name)
        cause = {
            "host": self.host,
            "process": name,
            "rank": end.get("rank") if end.get("rank") is not None else proc and proc.rank,
            "exit_code": end.get("exit_code"),
            "signal": end.get("signal"),
            "first_error": list(end.get("first_error") or end.get("lines") or [])[-3:],
        }
        self.restarted(self.host, name, count, cause)
        return True

    def restarted(self, host: str, name: str, count: int, cause: dict[str, Any]) -> None:
        """Record restart ``count`` of ``host``'s process ``name`` (seen here, or told by a
        follower) and pass it on to the leader."""
        self.policy.note_restart(host, name, count)
        self.last_restart = dict(cause, host=host, process=name, count=count, at=time.time())
        self.event("restarted", process=name, of_host=host, count=count, cause=cause)
        self.dirty = True
        if self.is_leader:
            self.notifier.notify("restarted", "running", sv_restart_reason(count, cause), host)
        if host == self.host and not self.is_leader:
            self.send_leader({"type": "restarted", "name": name, "count": count, "cause": cause})

    def from_follower_restart(self, host: str, message: dict[str, Any]) -> None:
        count = message.get("count")
        if (
            not isinstance(count, int)
            or self.policy.process(host, str(message.get("name"))) is None
        ):
            return
        cause = message.get("cause")
        self.restarted(host, str(message["name"]), count, cause if isinstance(cause, dict) else {})

    def watch_restarts(self) -> None:
        """Reap restarted wrappers; for ddp, notice torchrun's restarts on this host."""
        self.restarted_children = [c for c in self.restarted_children if c.poll() is None]
        if self.cfg.get("kind") == "horovod":
            for name in self.local.procs:
                if name.startswith(SV_HOROVOD_ROLE + "-"):
                    skip = self.horovod_dropped()  # elastic.py: lost hosts' are no restart
                    count, cause = sv_horovod_resets(self.job_dir, name, skip)
                    if count > self.torchrun_attempts.get(name, 0):
                        self.torchrun_attempts[name] = count
                        self.restarted(self.host, name, count, dict(cause, process=name))
        if self.cfg.get("kind") != "ddp" or not int(self.cfg.get("max_restarts") or 0):
            return
        for name, proc in self.local.procs.items():
            attempt = sv_torchrun_attempt(self.job_dir, name)
            if attempt <= self.torchrun_attempts.get(name, 0):
                continue
            lines: list[str] = []
            for path in proc.get("logs") or []:
                lines += sv_tail(os.path.expanduser(path), 64 * 1024)
            failure = sv_torchrun_failure(lines)
            # torchrun may make the new attempt's folder before its "failed (exitcode"
            # line reaches the log: wait for the cause a little (SV_CAUSE_WAIT_S) rather
            # than record a restart without it.
            seen = self.torchrun_seen.setdefault((name, attempt), time.time())
            if not failure and time.time() - seen < SV_CAUSE_WAIT_S:
                continue
            self.torchrun_attempts[name] = attempt
            ranks = [p.ranks for p in self.policy.processes if p.key == (self.host, name)]
            local_rank = failure.get("local_rank")
            cause = dict(failure, host=self.host, process=name)
            if ranks and isinstance(local_rank, int) and local_rank < len(ranks[0]):
                # As planned; c10d's rendezvous may give this host other global ranks.
                cause["rank"] = ranks[0][local_rank]
            self.restarted(self.host, name, attempt, cause)

    def restart_record(self) -> dict[str, Any]:
        """The restarts for ``supervisor.json``."""
        return {"restarts": self.policy.restart_count, "last_restart": self.last_restart}
