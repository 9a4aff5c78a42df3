"""The supervisor's part that talks to the other hosts' supervisors.

The leader listens; followers connect to it over the training network and send their
processes' ends and heartbeats; the leader sends stop, capture and final orders. Every
line is signed with the job's secret (``supervisor_wire.py``).

A peer that goes away is read one of two ways. Its connection closed (EOF or a reset):
the peer's kernel answered, so its supervisor process ended while the host lives; that
host reads **unsupervised** (an event and a note in ``supervisor.json``), its training
runs on, and nothing is stopped for it (a follower that loses its leader that way tries
to reconnect; a refused connection says the same). Its heartbeats stopped without a
close (host dead, network cut): the host is **lost**, and the policy fails the job
(fail-fast) as before. A host killed whole on a machine whose kernel lives on (as the
tests do) closes its connections too; the console, whose ssh connection to it dropped,
then writes ``lost-hosts/HOST`` on the other hosts (``jobctl host-lost``), and the
supervisors take that host as lost.

A part of the supervisor's single source (``supervisor_source.py``): standard library
only, Python >= 3.7, names prefixed ``sv_``/``Sv``.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import time
from typing import Any

if __name__ != "__main__":  # imported by the console/tests; on a host the parts precede
    from console.hostprogs.guarded_listener import GUARDED_AUTH_S, GuardedListener
    from console.hostprogs.jobctl.common import ENDED_HOSTS, read_text
    from console.hostprogs.supervisor.link import SvLink, SvPeer
    from console.hostprogs.supervisor.local import SV_LOST_DIR, SvLocal
    from console.hostprogs.supervisor.policy import (
        FAILED,
        HostSilent,
        JobPolicy,
        PolicyProcess,
        StopAsked,
    )
    from console.hostprogs.supervisor.wire import WireGuard, WireRefused, wire_pack


class SvPeers(SvLink):
    """The peer side of :class:`Supervisor` (a mixin: the state lives there)."""

    job_dir: str
    job_id: str
    host: str
    leader_host: str
    is_leader: bool
    cfg: dict[str, Any]
    secret: bytes
    guard: WireGuard
    silence_s: float
    connect_s: float
    beat_s: float
    started_at: float
    local: SvLocal
    policy: JobPolicy
    followers: list[str]
    progress: dict[str, float]
    peers: list[SvPeer]
    selector: selectors.BaseSelector
    listener: GuardedListener | None
    refusals: dict[str, Any]  # {"count", "since_told": {why: n}, "told_at"}
    leader: SvPeer | None
    leader_seen: float
    ever_connected: bool
    remote_verdict: dict[str, Any] | None
    dirty: bool
    remote_first_error: dict[str, list[str]]
    silent_since: dict[str, float]
    seen_hosts: set
    leader_error: str
    leader_lost: bool
    unsupervised: dict[str, dict[str, Any]]  # host -> {"at", "why"}: its supervisor ended
    last_connect: float
    hang: dict[str, Any] | None

    # Provided by Supervisor:
    def event(self, event: str, **details: Any) -> None: ...
    def first_failure(self) -> dict[str, Any] | None: ...
    def feed_end(self, host: str, end: dict[str, Any]) -> None: ...
    def apply(self, stop_now: bool) -> None: ...
    def capture(self) -> None: ...
    def local_progress(self) -> float | None: ...
    def from_follower_restart(self, host: str, message: dict[str, Any]) -> None: ...  # restart
    def from_follower_drained(self, host: str, message: dict[str, Any]) -> None: ...  # drain
    def from_spare_joined(self, host: str) -> None: ...  # elastic
    def from_follower_pace(self, host: str, message: dict[str, Any]) -> None: ...  # pace
    def from_leader_drain(self, message: dict[str, Any]) -> None: ...  # pace
    def spare_go(self) -> None: ...  # elastic
    def regroup(self, lost: str, hosts_now: list[str]) -> None: ...  # elastic

    def connect(self) -> None:
        now = time.time()
        if self.leader_host in self.unsupervised and now - self.last_connect < self.beat_s:
            return  # the leader's supervisor ended: try again once a heartbeat
        self.last_connect = now
        address = (str(self.cfg["leader_address"]), int(self.cfg["leader_port"]))
        try:
            sock = socket.create_connection(address, timeout=min(2.0, self.silence_s))
        except ConnectionRefusedError as exc:
            self.leader_error = str(exc)
            if self.ever_connected:
                # The leader's kernel answers, nobody listens: its supervisor ended.
                self.leader_seen = now
                self.peer_unsupervised(self.leader_host, "its supervisor refuses connections")
            return
        except OSError as exc:
            self.leader_error = str(exc)
            return
        sock.setblocking(False)
        leader = SvPeer(sock, f"{address[0]}:{address[1]}", authed=False)
        self.leader = leader
        leader.host = self.leader_host
        self.selector.register(sock, selectors.EVENT_READ, lambda: self.receive(leader))
        self.leader_seen = time.time()
        self.ever_connected = True
        self.peer_supervised(self.leader_host)
        # Held in the outbox until the leader's challenge is answered.
        self.send_leader({"type": "hello", "host": self.host})
        for end in self.local.ended.values():
            self.send_leader({"type": "ended", "end": end})  # again: the leader ignores repeats

    def send_leader(self, message: dict[str, Any]) -> None:
        if self.leader is not None and not self.leader.send(self.pack(message)):
            self.drop(self.leader, "send failed")

    def pack(self, message: dict[str, Any]) -> bytes:
        return wire_pack(self.secret, self.job_id, dict(message, sender=self.host))

    def broadcast(self, message: dict[str, Any]) -> None:
        data = self.pack(message)
        for peer in list(self.peers):
            if peer.host is not None and not peer.send(data):
                self.drop(peer, "send failed")

    def drop(self, peer: SvPeer, why: str) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(peer.sock)
        with contextlib.suppress(OSError):
            peer.sock.close()
        if peer is self.leader:
            self.leader = None
            self.leader_error = why
            if peer.closed and not self.leader_lost:
                self.peer_unsupervised(self.leader_host, f"its connection closed ({why})")
        elif peer in self.peers:
            self.peers.remove(peer)
            if peer.host is not None:
                self.event("peer-disconnected", peer=peer.host, why=why)
                if peer.closed and not self.follower_done(peer.host):
                    self.peer_unsupervised(peer.host, f"its connection closed ({why})")

    def peer_unsupervised(self, host: str, why: str) -> None:
        """``host``'s supervisor ended while the host lives: nothing is stopped for it."""
        if host in self.unsupervised:
            return
        self.unsupervised[host] = {"at": time.time(), "why": why}
        self.silent_since.pop(host, None)
        self.event("peer-unsupervised", peer=host, why=why)
        self.dirty = True

    def peer_supervised(self, host: str) -> None:
        if self.unsupervised.pop(host, None) is not None:
            self.event("peer-supervised", peer=host)
            self.dirty = True

    def receive(self, peer: SvPeer) -> None:
        self.handle(peer, peer.lines())

    def handle(self, peer: SvPeer, lines: list[bytes] | None) -> None:
        if lines is None:
            why = "connection closed" if peer.closed else peer.why or "connection failed"
            self.drop(peer, why)
            return
        if not peer.authed:
            lines = self.answer_challenge(peer, lines)
            if lines is None:
                return
        for line in lines:
            try:
                message = self.guard.open(line)
            except WireRefused as exc:
                self.event("refused", peer=peer.address, why=str(exc))
                peer.closed = False  # a stranger, not a peer that ended
                self.drop(peer, f"refused: {exc}")
                return
            peer.last_seen = time.time()
            if peer is self.leader:
                self.leader_seen = peer.last_seen
                self.from_leader(message)
            else:
                self.from_follower(peer, message)

    def stop_message(self, kind: str = "stop") -> dict[str, Any]:
        return {"type": kind, "state": self.policy.verdict, "first_failure": self.first_failure()}

    def from_follower(self, peer: SvPeer, message: dict[str, Any]) -> None:
        kind = message.get("type")
        sender = str(message.get("sender"))
        if kind == "hello":
            if sender not in self.followers:
                self.event("refused", peer=peer.address, why=f"{sender!r} is no host of the job")
                self.drop(peer, "not a host of the job")
                return
            peer.host = sender
            self.seen_hosts.add(sender)
            self.event("peer-connected", peer=sender, address=peer.address)
            self.peer_supervised(sender)
            if self.policy.stop_ordered_at is not None:
                peer.send(self.pack(self.stop_message()))
            return
        if peer.host is None:
            self.drop(peer, "no hello")
            return
        if kind == "ended":
            self.feed_end(peer.host, dict(message.get("end") or {}))
        elif kind == "restarted":
            self.from_follower_restart(peer.host, message)
        elif kind == "drained":
            self.from_follower_drained(peer.host, message)  # drain.py
        elif kind == "spare-joined":
            self.from_spare_joined(peer.host)  # elastic.py
        elif kind == "pace":
            self.from_follower_pace(peer.host, message)  # pace/hook.py
        elif kind == "beat":
            if isinstance(message.get("progress"), (int, float)):
                self.progress[peer.host] = float(message["progress"])
        elif kind == "captured":
            # A follower's ranks captured for the hang this leader marked.
            names = [str(n) for n in message.get("captured") or ()]
            if self.hang is not None and names:
                self.hang["captured"] = [*self.hang["captured"], *names]
                self.event("peer-captured", peer=peer.host, captured=names)
                self.dirty = True
        elif kind == "stop":
            # The job's own stop: the only thing a peer may ask.
            self.event("stop-asked", peer=peer.host)
            self.apply(self.policy.feed(StopAsked(peer.host, time.time())))

    def from_leader(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind in ("stop", "final"):
            if self.remote_verdict is None or kind == "final":
                self.remote_verdict = {
                    "state": message.get("state") or FAILED,
                    "first_failure": message.get("first_failure"),
                    "final": kind == "final",
                }
                self.dirty = True
            if kind == "stop" and self.local.term_at is None:
                self.event("stop-ordered", by=self.leader_host, state=message.get("state"))
                self.local.stop(float(self.cfg.get("grace", 10.0)))
        elif kind == "capture":
            self.capture()
        elif kind == "spare-go":
            self.spare_go()  # elastic.py: the first round formed, a spare's agent may start
        elif kind == "drain":
            self.from_leader_drain(message)  # pace/hook.py: --exclude-slow
        elif kind == "member-lost":  # elastic.py: a scale-down; stop workers still waiting
            self.regroup(str(message.get("host")), list(message.get("hosts_now") or ()))

    def beat(self) -> None:
        progress = self.local_progress()
        if self.is_leader:
            self.broadcast({"type": "beat"})
        else:
            self.send_leader({"type": "beat", "progress": progress})

    def check_silence(self) -> None:
        self.read_lost_notes()
        if self.is_leader:
            self.read_ended_notes()
        now = time.time()
        if self.is_leader:
            connected = {p.host for p in self.peers if p.host is not None}
            if self.listener is not None:
                self.listener.expire(now)
            for peer in list(self.peers):
                if peer.host is not None and now - peer.last_seen > self.silence_s:
                    self.drop(peer, f"no heartbeat for {now - peer.last_seen:.0f} s")
                elif peer.host is None and now - peer.last_seen > GUARDED_AUTH_S:
                    self.drop(peer, "no hello after its proof")
            for host in self.followers:
                if host in connected and any(p.host == host for p in self.peers):
                    self.silent_since.pop(host, None)
                    continue
                if self.follower_done(host) or host in self.unsupervised:
                    continue
                since = self.silent_since.setdefault(
                    host, now if host in self.seen_hosts else self.started_at
                )
                # A host that never connected gets the start's time, unless the job is
                # already decided (then nobody waits long for its word).
                seen = host in self.seen_hosts or self.policy.verdict is not None
                limit = self.silence_s if seen else self.connect_s
                if now - since > limit:
                    why = "connection lost" if host in self.seen_hosts else "never connected"
                    self.silent(host, f"{why} (its supervisor was silent for {now - since:.0f} s)")
            self.seen_hosts |= connected
            return
        limit = self.silence_s if self.ever_connected else self.connect_s
        if self.leader is None and not self.leader_lost and now - self.leader_seen > limit:
            self.silent(
                self.leader_host,
                f"connection lost (the leader's supervisor was silent for "
                f"{now - self.leader_seen:.0f} s: {self.leader_error})",
            )
        elif self.leader is not None and now - self.leader_seen > self.silence_s:
            self.drop(self.leader, f"no heartbeat for {now - self.leader_seen:.0f} s")

    def read_lost_notes(self) -> None:
        """Hosts the console lost (``lost-hosts/HOST``), taken as lost unless their
        supervisor is connected and beating (then the console's own link was the one
        that broke)."""
        try:
            names = os.listdir(os.path.join(self.job_dir, SV_LOST_DIR))
        except OSError:
            return
        for host in names:
            if host == self.host or host.endswith(".tmp"):
                continue
            if self.is_leader:
                connected = any(p.host == host for p in self.peers)
                known = host in self.followers and not self.follower_done(host)
                # A Horovod elastic job's host (elastic.py): in the job, no supervisor.
                known = known or host in set(self.policy.member_hosts) & set(self.policy.hosts_now)
            else:
                connected = self.leader is not None
                known = host == self.leader_host and not self.leader_lost
            if connected or not known:
                continue
            why = read_text(os.path.join(self.job_dir, SV_LOST_DIR, host))
            self.unsupervised.pop(host, None)
            self.silent(host, f"connection lost ({why or 'the console lost it'})")

    def read_ended_notes(self) -> None:
        """Processes of unsupervised hosts that a console saw end
        (``ended-hosts/HOST.json``, ``jobctl host-ended``): nothing else tells the
        leader, which would otherwise wait on them for ever. A host whose supervisor
        is connected reports its own ends; its notes are ignored."""
        try:
            names = os.listdir(os.path.join(self.job_dir, ENDED_HOSTS))
        except OSError:
            return
        for entry in names:
            host = entry[: -len(".json")] if entry.endswith(".json") else None
            if host is None or host not in self.unsupervised or self.follower_done(host):
                continue
            text = read_text(os.path.join(self.job_dir, ENDED_HOSTS, entry)) or "[]"
            try:
                ends = json.loads(text)
            except ValueError:
                continue
            known = {p.name for p in self.policy.processes if p.host == host}
            for end in ends if isinstance(ends, list) else ():
                if not isinstance(end, dict) or end.get("name") not in known:
                    continue
                if (host, end["name"]) in self.policy.ended:
                    continue
                self.dirty = True
                self.event("process-ended", peer=host, name=end["name"], seen_by="console")
                self.feed_end(host, end)

    def follower_done(self, host: str) -> bool:
        return all(p.key in self.policy.ended for p in self.policy.processes if p.host == host)

    def silent(self, host: str, reason: str) -> None:
        self.event("host-silent", peer=host, why=reason)
        if host == self.leader_host and not self.is_leader:
            self.leader_lost = True
            # Judge alone: the leader's processes are out of sight, so they count as lost.
            self.policy.processes.append(PolicyProcess(host, "(leader)", "leader"))
        self.apply(self.policy.feed(HostSilent(host, reason, time.time())))
