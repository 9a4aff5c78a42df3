"""The supervisor's part for a job with a rendezvous host (``--rendezvous-host``, issue 31).

The rendezvous host runs the job's store program (hostprogs/rendezvous_store.py, the
plan's first launch, role ``rendezvous``) and so the leader supervisor; it trains
nothing. What changes for the supervisors:

- The leader has no torchrun workers of its own to read a round from (rounds.py): the
  store program writes the rendezvous' last round (``rendezvous-round.json``, read from
  the store as torch keeps it), and the leader reads that instead (:meth:`store_round`).
- The policy (policy.py) counts training hosts only, takes the store's end as the job's
  failure, and stops the store once training ended.
- The leader tells the store program, every loop, which training hosts it suspects (a
  supervisor's connection closed, a scale-down) and which it expects in a round (the
  hosts of the job now, but those): ``rendezvous-hosts.json`` (:meth:`tell_store`). The
  store drops a suspect's agent from torch's state once its beats stopped, and closes
  a round that holds every expected host, instead of waiting torch's keep-alive and
  last call (hostprogs/rendezvous_store.py).
- A follower whose connection to the leader closed cannot tell a dead supervisor from a
  dead host (a host's user's processes killed on a kernel that lives on): it asks the
  store's port (:meth:`check_rendezvous`). A store that does not answer is a rendezvous
  host lost: nothing can meet again without it, so the job fails, named as the cause
  (policy.py), rather than run on unsupervised until a restart that cannot happen.

A part of the supervisor's single source (``supervisor/source.py``): standard library
only, Python >= 3.7, names prefixed ``sv_``/``Sv``/``SV_``.
"""

from __future__ import annotations

import json
import os
import socket
from typing import TYPE_CHECKING, Any

if __name__ != "__main__":  # imported by the console/tests; on a host the parts precede
    from console.hostprogs.jobctl.common import read_text, write_atomic

SV_STORE_ROUND = "rendezvous-round.json"  # hostprogs/rendezvous_store.py ROUND_FILE
SV_STORE_HOSTS = "rendezvous-hosts.json"  # jobs/plan/ddp_store.py HOSTS_FILE
SV_RENDEZVOUS_ROLE = "rendezvous"  # jobs/plan/rendezvous.py ROLE
SV_STORE_PROBE_S = 1.0  # a connect to the store's port: the kernel answers, not torch
SV_STORE_MISSES = 2  # probes in a row without an answer before the host counts as lost


def sv_store_round(job_dir: str) -> tuple[int, int] | None:
    """(round, agents) of the rendezvous' last complete round, as the store program
    wrote it; None before the first or when the file says nothing usable."""
    try:
        found = json.loads(read_text(os.path.join(job_dir, SV_STORE_ROUND)) or "null")
    except ValueError:
        return None
    if not isinstance(found, dict) or not found.get("complete"):
        return None
    try:
        return int(found["round"]), int(found["agents"])
    except (KeyError, TypeError, ValueError):
        return None


def sv_store_answer(address: str, port: int) -> str | None:
    """None when the store's port takes a connection, else why not."""
    try:
        with socket.create_connection((address, port), timeout=SV_STORE_PROBE_S):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


class SvRendezvous:
    """Mixed into the supervisor (through SvElastic): the store's round and its port."""

    host: str
    is_leader: bool
    leader_host: str
    leader_lost: bool
    cfg: dict[str, Any]
    policy: Any
    job_dir: str
    unsupervised: dict[str, dict[str, Any]]

    if TYPE_CHECKING:  # provided by the supervisor and its other parts

        def event(self, event: str, **details: Any) -> None: ...
        def silent(self, host: str, reason: str) -> None: ...

    def init_rendezvous(self) -> None:
        self.rendezvous_host = str(self.cfg.get("rendezvous_host") or "")
        self.policy.rendezvous_host = self.rendezvous_host
        self.store_misses = 0
        self.store_told: dict[str, list[str]] | None = None

    def tell_store(self) -> None:
        """The leader on the rendezvous host of an elastic job, each loop: the training
        hosts it suspects and those it expects, to the store program (on change)."""
        if (
            not self.rendezvous_host
            or self.host != self.rendezvous_host
            or not self.is_leader
            or self.cfg.get("kind") != "ddp"  # Horovod's driver is no torch store
            or not self.policy.min_hosts
            or self.policy.verdict is not None
        ):
            return
        gone = {str(down["host"]) for down in self.policy.scale_downs}
        suspects = sorted(gone | set(self.unsupervised))
        told = {
            "suspects": suspects,
            "expected": [h for h in self.policy.hosts_now if h not in suspects],
        }
        if told == self.store_told:
            return
        try:
            write_atomic(os.path.join(self.job_dir, SV_STORE_HOSTS), json.dumps(told) + "\n")
        except OSError as exc:  # the store then waits torch's own timeouts: no worse
            if self.store_told is None:
                self.event("rendezvous-told", why=str(exc))
            self.store_told = told
            return
        if self.store_told is None or told["suspects"] != self.store_told["suspects"]:
            self.event("rendezvous-told", **told)
        self.store_told = told

    def store_round(self) -> tuple[int, int] | None:
        """The leader on the rendezvous host: the store's last round (else None)."""
        if not self.rendezvous_host or self.host != self.rendezvous_host:
            return None
        return sv_store_round(self.job_dir)

    def check_rendezvous(self) -> None:
        """A follower, each heartbeat: once the leader's connection closed, the store's
        port says whether the rendezvous host still runs the job (see the module doc)."""
        if (
            self.is_leader
            or not self.rendezvous_host
            or self.leader_host != self.rendezvous_host
            or self.leader_lost
            or self.leader_host not in self.unsupervised
            or self.policy.verdict is not None
        ):
            self.store_misses = 0
            return
        address = str(self.cfg.get("rendezvous_address") or "")
        port = int(self.cfg.get("rendezvous_port") or 0)
        why = sv_store_answer(address, port) if address and port else None
        if why is None:
            self.store_misses = 0
            return
        self.store_misses += 1
        self.event("rendezvous-store-silent", peer=self.leader_host, why=why)
        if self.store_misses >= SV_STORE_MISSES:
            self.silent(
                self.leader_host,
                f"its supervisor's connection closed and its store at {address}:{port} "
                f"does not answer ({why})",
            )
