"""The supervisor's part for elastic membership (ddp ``--min-hosts M``, the leader only).

torchrun runs ``--nnodes M:N``: when a host is lost, the survivors' agents restart their
workers and meet again without it. The policy (``JobPolicy`` with ``min_hosts``) takes a
lost host as a **scale-down** while at least M hosts remain, and fails the job below M
or when the lost host is the first one (its agent holds the rendezvous: the survivors
cannot meet without it).

A host is lost when its supervisor goes silent (heartbeats stop without a close) or the
console says so (``lost-hosts/HOST``): ``peers.py`` feeds those. A host killed whole on a
kernel that lives on (a crash of the host's user's processes, as the tests do) closes
its supervisor's connection instead, which alone reads *unsupervised* (its training may
run on). Here that doubt is settled by torchrun itself: this (the leader's) host's
workers carry the round they belong to (``GROUP_WORLD_SIZE``: agents in the round,
``TORCHELASTIC_RESTART_COUNT``). Once a round holds no more agents than the hosts whose
supervisors are still connected, every unsupervised host was left out of it: lost.

Spares (``--spare-hosts``: a ddp launch with no planned ranks) run a torchrun agent of
the same rendezvous, gated (``SV_SPARE_GATE``) until the leader, once its own workers
run (the first round formed), sends ``spare-go``; the agent then waits in torch's
redundancy list until a host leaves. A spare's supervisor sees its agent's workers
start (it joined a round) and sends ``spare-joined``: the leader's policy counts it in
``hosts_now`` and writes a ``spare-joined`` event.

A part of the supervisor's single source (``supervisor/source.py``): standard library
only, Python >= 3.7, names prefixed ``sv_``/``Sv``/``SV_``.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

if __name__ != "__main__":  # imported by the console/tests; on a host the parts precede
    from console.hostprogs.jobctl.common import live_stats

SV_SPARE_GATE = "spare-go"  # + ".HOST" in the job directory (jobs/plan/ddp.py)
SV_ROUND_VARS = (b"GROUP_WORLD_SIZE=", b"TORCHELASTIC_RESTART_COUNT=")


def sv_process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every live process."""
    return {pid: (ppid, pgid) for pid, ppid, pgid, _sid, _state in live_stats()}


def sv_torchrun_round(group: int) -> tuple[int, int] | None:
    """(restart count, agents in the round) of the newest round among the workers of the
    torchrun in process group ``group`` (its children: workers lead sessions of their
    own), read from their environment; None while none runs. The count is this agent's
    (a restart for a membership change does not add to it), not a round number."""
    table = sv_process_table()
    agents = {pid for pid, (_parent, pgid) in table.items() if pgid == group}
    best = None
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
            found = [e[len(prefix) :] for e in entries if e.startswith(prefix)]
            values.append(int(found[0]) if found and found[0].isdigit() else None)
        size, count = values
        if size is None:
            continue
        current = (count or 0, size)
        if best is None or current > best:
            best = current
    return best


class SvElastic:
    """Mixed into the supervisor: scale-downs seen, and unsupervised hosts settled."""

    host: str
    is_leader: bool
    cfg: dict[str, Any]
    policy: Any
    local: Any
    peers: list[Any]
    unsupervised: dict[str, dict[str, Any]]
    dirty: bool
    job_dir: str

    if TYPE_CHECKING:  # provided by the supervisor and its other parts

        def event(self, event: str, **details: Any) -> None: ...
        def silent(self, host: str, reason: str) -> None: ...
        def send_leader(self, message: dict[str, Any]) -> None: ...
        def pack(self, message: dict[str, Any]) -> bytes: ...

    def init_elastic(self) -> None:
        self.scale_downs_told = 0
        self.joins_told = 0
        self.joined_told = False  # a spare's: the leader heard it joined
        self.last_round: tuple[int, int] | None = None
        spares = [
            str(p["host"])
            for p in self.cfg.get("processes") or ()
            if self.cfg.get("kind") == "ddp" and p.get("role") == "torchrun" and not p.get("ranks")
        ]
        self.spares = list(dict.fromkeys(spares))
        self.policy.spare_hosts = list(self.spares)
        if self.is_leader and self.cfg.get("kind") == "ddp":
            self.policy.min_hosts = int(self.cfg.get("min_hosts") or 0)
            self.policy.master_host = self.host  # node rank 0: its agent holds the rendezvous

    def spare_go(self) -> None:
        """The leader says the first round formed: this spare's agent may start."""
        if self.host not in self.spares:
            return
        gate = os.path.join(self.job_dir, SV_SPARE_GATE + "." + self.host)
        if not os.path.exists(gate):
            with open(gate, "w") as handle:
                handle.write("go\n")
            self.event("spare-started")

    def check_spare(self) -> None:
        """A spare's supervisor, each heartbeat: once its agent's workers run, it joined
        a round; the leader is told (again, until it was connected to hear it)."""
        if self.joined_told or self.host not in self.spares:
            return
        if self.host not in self.policy.joined:
            for name in self.local.procs:
                group = self.local.pgids.get(name)
                found = sv_torchrun_round(group) if group else None
                if found is not None:
                    self.policy.spare_joined(self.host, time.time())
                    self.event("spare-joined", restart=found[0], agents=found[1])
                    self.dirty = True
                    break
        if self.host in self.policy.joined and getattr(self, "leader", None) is not None:
            self.send_leader({"type": "spare-joined"})
            self.joined_told = True

    def from_spare_joined(self, host: str) -> None:
        if self.is_leader and self.policy.spare_joined(host, time.time()):
            self.dirty = True

    def tell_spares(self) -> None:
        """The leader: ``spare-go`` to waiting spares once its workers run; an event for
        each spare that joined."""
        if self.last_round is not None and self.policy.verdict is None:
            data = self.pack({"type": "spare-go"})
            for peer in self.peers:
                if peer.host is not None and self.policy.waiting_spare(peer.host):
                    peer.send(data)
        for join in self.policy.joins[self.joins_told :]:
            self.joins_told += 1
            details = {k: v for k, v in join.items() if k != "host"}
            self.event("spare-joined", peer=join["host"], **details)
            self.dirty = True

    def check_membership(self) -> None:
        """Each heartbeat, on an elastic job's leader: torchrun's round, the unsupervised
        hosts it left out, and the scale-downs the policy made (events)."""
        if not self.is_leader:
            self.check_spare()
        if not (self.is_leader and self.policy.min_hosts) or self.policy.verdict is not None:
            self.tell_scale_downs()
            return
        for name in self.local.procs:
            group = self.local.pgids.get(name)
            found = sv_torchrun_round(group) if group else None
            if found is not None and found != self.last_round:
                self.last_round = found
                self.event("torchrun-round", restart=found[0], agents=found[1])
        doubtful = [h for h in sorted(self.unsupervised) if h in self.policy.hosts_now]
        if self.last_round is not None and doubtful:
            connected = {p.host for p in self.peers if p.host is not None} | {self.host}
            agents = self.last_round[1]
            if agents <= len(connected & set(self.policy.hosts_now)):
                for host in doubtful:
                    self.unsupervised.pop(host, None)
                    self.silent(
                        host,
                        f"host lost: its supervisor's connection closed, and torchrun's "
                        f"next round went on with {agents} of {len(self.policy.hosts)} hosts "
                        "without it",
                    )
        self.tell_spares()
        self.tell_scale_downs()

    def tell_scale_downs(self) -> None:
        """One ``scaled-down`` event per scale-down the policy made, with its cause."""
        for down in self.policy.scale_downs[self.scale_downs_told :]:
            self.scale_downs_told += 1
            details = {k: v for k, v in down.items() if k != "host"}
            self.event("scaled-down", peer=down["host"], **details)  # "host": the writer
            self.dirty = True

    def elastic_record(self) -> dict[str, Any]:
        """Membership for ``supervisor.json`` (an elastic job's leader only)."""
        if not self.policy.min_hosts:
            return {}
        return {
            "min_hosts": self.policy.min_hosts,
            "hosts_now": list(self.policy.hosts_now),
            "hosts_total": len(self.policy.hosts),
            "scale_downs": list(self.policy.scale_downs),
            "spare_hosts": list(self.policy.spare_hosts),
            "joins": list(self.policy.joins),
            "elastic_round": list(self.last_round) if self.last_round else None,
            "membership_at": time.time(),
        }
