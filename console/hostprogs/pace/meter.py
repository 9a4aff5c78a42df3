"""How busy each rank of the job on this host is, read from outside the process.

Every thread's ``/proc/PID/task/TID/schedstat`` holds two counters the kernel keeps
anyway: nanoseconds on a CPU, and nanoseconds runnable but waiting for one (the run
queue; a cgroup's CFS quota throttle counts here too, checked on cgroup v1). In a
synchronous job a rank that waits for a slower one in a collective *sleeps* (gloo blocks
in the kernel), so its busiest thread's on-CPU + run-queue time per wall second drops
to its share of the step, while the rank that holds the others back stays near 1. On-CPU
time alone cannot tell them apart: under a quota the slow rank gets no more CPU than
the rest. The busiest thread (the one that computes, and for GPUs launches) stands for
the rank, so intra-op threads or a data loader's do not dilute it.

The figures go out as counters that only grow (``busy_s``, ``cpu_s``, ``wall_s`` since
the rank was first seen); the leader's :class:`PaceBoard` (``score.py``) cuts them into
windows. Ranks are the job's marked processes (``DISTCONSOLE_JOB_ID``) with a rank in
their environment (torchrun's ``RANK``, Open MPI's, Horovod's, PMI's); a rank's own
children (data loader workers inherit ``RANK``) are left out.

A part of the supervisor's single source: standard library only, Python >= 3.7, names
prefixed ``pace_``/``Pace``/``PACE_``.
"""

from __future__ import annotations

import os
import time
from typing import Any

PACE_MARKER_VAR = "DISTCONSOLE_JOB_ID"
PACE_RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK", "PMIX_RANK")
PACE_LOCAL_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "HOROVOD_LOCAL_RANK")
PACE_RESCAN_S = 10.0  # the process table is read again this often (ranks restart)
PACE_MAX_THREADS = 256  # per rank: a pathological thread count costs no more than this


def pace_read(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode(errors="replace")
    except OSError:
        return None


def pace_environ(pid: int, wanted: tuple[str, ...]) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return {}
    found = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        name = key.decode(errors="replace")
        if sep and name in wanted:
            found[name] = value.decode(errors="replace")
    return found


def pace_int(text: str | None) -> int | None:
    try:
        return int(str(text).strip())
    except ValueError:
        return None


def pace_ranks(job_id: str) -> dict[int, dict[str, Any]]:
    """rank -> {"pid", "local"}: the job's rank processes on this machine."""
    wanted = (PACE_MARKER_VAR, *PACE_RANK_VARS, *PACE_LOCAL_VARS)
    me = os.getpid()
    seen: dict[int, tuple[int, int, int | None]] = {}  # pid -> (rank, ppid, local)
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        env = pace_environ(int(entry), wanted)
        if env.get(PACE_MARKER_VAR) != job_id:
            continue
        rank = next((pace_int(env[v]) for v in PACE_RANK_VARS if v in env), None)
        if rank is None:
            continue
        stat = pace_read(f"/proc/{entry}/stat") or ""
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) < 2 or fields[0] in ("Z", "X"):
            continue
        local = next((pace_int(env[v]) for v in PACE_LOCAL_VARS if v in env), None)
        seen[int(entry)] = (rank, int(fields[1]), local)
    ranks: dict[int, dict[str, Any]] = {}
    for pid, (rank, ppid, local) in sorted(seen.items()):
        if ppid in seen and seen[ppid][0] == rank:
            continue  # a child of the rank (a data loader worker)
        ranks.setdefault(rank, {"pid": pid, "local": local})
    return ranks


def pace_threads(pid: int) -> dict[int, tuple[int, int]]:
    """tid -> (ns on a CPU, ns runnable waiting for one) of each thread of ``pid``."""
    found: dict[int, tuple[int, int]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids[:PACE_MAX_THREADS]:
        text = pace_read(f"/proc/{pid}/task/{tid}/schedstat")
        parts = text.split() if text else []
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            found[int(tid)] = (int(parts[0]), int(parts[1]))
    return found


class PaceMeter:
    """This host's ranks of one job, sampled on demand (the supervisor's loop, ~1 s)."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.ranks: dict[int, dict[str, Any]] = {}
        self.scanned_at = 0.0
        # rank -> {"pid", "local", "at", "threads", "busy_s", "cpu_s", "wall_s"}
        self.state: dict[int, dict[str, Any]] = {}

    def sample(self, now: float | None = None) -> list[dict[str, Any]]:
        """Each rank's counters after one more reading of its threads."""
        now = time.monotonic() if now is None else now
        gone = [r for r, s in self.state.items() if not os.path.exists(f"/proc/{s['pid']}")]
        if gone or not self.state or now - self.scanned_at >= PACE_RESCAN_S:
            self.scanned_at = now
            self.ranks = pace_ranks(self.job_id)
        out = []
        for rank, proc in sorted(self.ranks.items()):
            threads = pace_threads(proc["pid"])
            if not threads:
                continue
            state = self.state.get(rank)
            if state is None or state["pid"] != proc["pid"]:
                # A new rank (or a restarted one): counted from its next reading on.
                state = {"pid": proc["pid"], "busy_s": 0.0, "cpu_s": 0.0, "wall_s": 0.0}
                state.update(at=now, threads=threads)
                self.state[rank] = state
            else:
                self.advance(state, threads, now)
            out.append(
                {
                    "rank": rank,
                    "pid": proc["pid"],
                    "local": proc.get("local"),
                    "busy_s": round(state["busy_s"], 4),
                    "cpu_s": round(state["cpu_s"], 4),
                    "wall_s": round(state["wall_s"], 4),
                }
            )
        for rank in [r for r in self.state if r not in self.ranks]:
            del self.state[rank]
        return out

    @staticmethod
    def advance(state: dict[str, Any], threads: dict[int, tuple[int, int]], now: float) -> None:
        wall = now - state["at"]
        if wall <= 0:
            return
        before = state["threads"]
        best_busy, best_cpu = 0, 0
        for tid, (cpu, queued) in threads.items():
            old_cpu, old_queued = before.get(tid, (0, 0))
            busy = (cpu - old_cpu) + (queued - old_queued)
            if busy > best_busy:
                best_busy, best_cpu = busy, cpu - old_cpu
        # A thread cannot be busy longer than the wall time (readings a moment apart).
        state["busy_s"] += min(best_busy / 1e9, wall)
        state["cpu_s"] += min(best_cpu / 1e9, wall)
        state["wall_s"] += wall
        state["at"] = now
        state["threads"] = threads
