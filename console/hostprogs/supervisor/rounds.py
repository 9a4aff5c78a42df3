"""torchrun's rounds as this host's process table shows them (ddp with ``--min-hosts``).

A torchrun agent's workers carry the round they belong to in their environment
(``GROUP_WORLD_SIZE``: agents in the round; ``TORCHELASTIC_RESTART_COUNT``). The leader
reads it to settle a host whose supervisor's connection closed (elastic.py).

It also speeds a scale-down up. When a host is lost without its sockets closing (a
crash, a power cut, a cut network: its supervisor's heartbeats just stop), the
survivors' workers wait in a collective for its ranks until gloo's or NCCL's timeout
(30 min by default), and only then does torchrun restart them and meet again without
it. The supervisors know sooner (``silence_s``): once the leader's policy scales the
job down, every survivor's supervisor sends SIGTERM to its workers still in a round
larger than the hosts left (:func:`sv_stop_stale_workers`); torchrun's agent takes
them as failed and re-rendezvous at once (one of ``--max-restarts``, as any host
loss). Workers already in a round of the survivors (their collective failed first)
are left alone: stopping them would cost a second restart.

A part of the supervisor's single source (``supervisor/source.py``): standard library
only, Python >= 3.7, names prefixed ``sv_``/``SV_``.
"""

from __future__ import annotations

import contextlib
import os
import signal

if __name__ != "__main__":  # imported by the console/tests; on a host the parts precede
    from console.hostprogs.jobctl.common import live_stats

SV_ROUND_VARS = (b"GROUP_WORLD_SIZE=", b"TORCHELASTIC_RESTART_COUNT=")


def sv_process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every live process."""
    return {pid: (ppid, pgid) for pid, ppid, pgid, _sid, _state in live_stats()}


def sv_torchrun_workers(group: int) -> dict[int, tuple[int, int]]:
    """worker pid -> (restart count, agents in its round) of each worker of the torchrun
    in process group ``group`` (its children: workers lead sessions of their own)."""
    table = sv_process_table()
    agents = {pid for pid, (_parent, pgid) in table.items() if pgid == group}
    found = {}
    for pid, (parent, _pgid) in table.items():
        if parent not in agents:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                entries = handle.read().split(b"\0")
        except OSError:
            continue
        values = []
        for prefix in SV_ROUND_VARS:
            named = [e[len(prefix) :] for e in entries if e.startswith(prefix)]
            values.append(int(named[0]) if named and named[0].isdigit() else None)
        size, count = values
        if size is not None:
            found[pid] = (count or 0, size)
    return found


def sv_torchrun_round(group: int) -> tuple[int, int] | None:
    """(restart count, agents in the round) of the newest round among the workers of the
    torchrun in process group ``group``; None while none runs. The count is this
    agent's (a restart for a membership change does not add to it), not a round number."""
    return max(sv_torchrun_workers(group).values(), default=None)


def sv_stop_stale_workers(groups: list[int], hosts_now: int) -> list[int]:
    """SIGTERM to every worker of the torchruns in ``groups`` whose round holds more
    agents than ``hosts_now`` (a lost host's among them); the pids signalled."""
    stopped = []
    for group in groups:
        for pid, (_count, size) in sorted(sv_torchrun_workers(group).items()):
            if size <= hosts_now:
                continue
            with contextlib.suppress(OSError):  # ended meanwhile
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signal.SIGTERM)  # the worker's own children too
                else:
                    os.kill(pid, signal.SIGTERM)
                stopped.append(pid)
    return stopped
