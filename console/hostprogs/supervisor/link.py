"""The supervisors' links: one TCP connection each, and the leader's guarded port.

The leader listens through ``guarded_listener.py``: a connection is a peer only once it
answered the listener's challenge with the job's key (``authenticated``); one that did not
is dropped and counted (``refused``). A follower's link to the leader answers that
challenge first (``answer_challenge``) and holds what it sends until then. After the
proof every line is signed (``wire.py``) and bounded (``SvPeer.split``): a line over
``WIRE_MAX_LINE`` bytes, partial ones too, drops the peer.

A part of the supervisor's single source (``source.py``): standard library only,
Python >= 3.7, names prefixed ``sv_``/``Sv``.
"""

from __future__ import annotations

import os
import selectors
import socket
import time
from typing import TYPE_CHECKING, Any

if __name__ != "__main__":  # imported by the console/tests; on a host the parts precede
    from console.hostprogs.guarded_listener import (
        GUARDED_AUTH_S,
        GUARDED_PROOF_MAX,
        GuardedListener,
        guarded_answer,
        guarded_raise_nofile,
    )
    from console.hostprogs.jobctl.common import write_atomic
    from console.hostprogs.supervisor.local import SV_PORT
    from console.hostprogs.supervisor.wire import WIRE_MAX_LINE

# What a closed connection (the peer's kernel answered) looks like, as opposed to silence.
SV_CLOSED_ERRORS = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
SV_OUTBOX_MAX = 256  # lines a follower holds for a leader that has not challenged it yet
SV_REFUSALS_LOGGED = 20  # "refused" events written one by one; then one summary a minute


class SvPeer:
    """One TCP connection to another supervisor: buffered signed lines both ways.

    Nothing travels before the listener's challenge is answered (``guarded_listener.py``):
    what a follower sends until then waits in ``outbox``."""

    def __init__(self, sock: socket.socket, address: str, authed: bool = True) -> None:
        self.sock = sock
        self.address = address
        self.host: str | None = None  # known once its hello was accepted
        self.buffer = b""
        self.last_seen = time.time()
        self.closed = False  # EOF or reset: the peer's process ended, its kernel answered
        self.authed = authed  # a follower's link to the leader: once it answered the challenge
        self.outbox: list[bytes] = []
        self.why = ""  # why lines() gave up, beyond a close

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, data: bytes) -> bool:
        if not self.authed:
            self.outbox.append(data)
            return len(self.outbox) <= SV_OUTBOX_MAX  # a leader that never challenges
        try:
            self.sock.sendall(data)
            return True
        except SV_CLOSED_ERRORS:
            self.closed = True
            return False
        except OSError:
            return False

    def lines(self) -> list[bytes] | None:
        """Complete lines read now; None when the connection closed, failed, or holds a
        line longer than the wire allows (partial lines count: memory stays bounded)."""
        try:
            data = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return []
        except SV_CLOSED_ERRORS:
            self.closed = True
            return None
        except OSError as exc:
            self.why = f"connection failed ({exc})"
            return None
        if not data:
            self.closed = True
            return None
        self.buffer += data
        return self.split()

    def split(self) -> list[bytes] | None:
        *done, self.buffer = self.buffer.split(b"\n")
        if len(self.buffer) > WIRE_MAX_LINE or any(len(line) > WIRE_MAX_LINE for line in done):
            self.why = f"a line over {WIRE_MAX_LINE} bytes"
            return None
        return done


class SvLink:
    """The link side of :class:`Supervisor` (a mixin: the state lives there)."""

    job_dir: str
    job_id: str
    cfg: dict[str, Any]
    secret: bytes
    peers: list[SvPeer]
    selector: selectors.BaseSelector
    listener: GuardedListener | None
    refusals: dict[str, Any]  # {"count", "since_told": {why: n}, "told_at"}

    if TYPE_CHECKING:  # provided by the supervisor and its peers' part

        def event(self, event: str, **details: Any) -> None: ...
        def drop(self, peer: SvPeer, why: str) -> None: ...
        def receive(self, peer: SvPeer) -> None: ...
        def handle(self, peer: SvPeer, lines: list[bytes] | None) -> None: ...

    def listen(self) -> None:
        """The leader's port, on the address the followers connect to (the leader's
        inventory address, ``bind`` in the config) when it is this host's."""
        nofile = guarded_raise_nofile()
        listener = GuardedListener(
            self.selector,
            self.secret,
            self.job_id,
            self.authenticated,
            self.refused,
            auth_s=float(self.cfg.get("auth_s") or GUARDED_AUTH_S),
        )
        address, port = listener.listen(
            str(self.cfg.get("bind") or ""), int(self.cfg.get("port") or 0)
        )
        self.listener = listener
        where = {"every_address": listener.bound_why} if listener.bound_why else {}
        self.event("listening", address=address, port=port, nofile=nofile, **where)
        write_atomic(os.path.join(self.job_dir, SV_PORT), f"{port}\n")

    def authenticated(self, sock: socket.socket, address: str, rest: bytes) -> None:
        """A connection that proved the key (``guarded_listener.py``): now a peer, whose
        signed hello and lines follow (some may have come with the proof)."""
        peer = SvPeer(sock, address)
        self.peers.append(peer)
        self.selector.register(sock, selectors.EVENT_READ, lambda: self.receive(peer))
        peer.buffer = rest
        self.handle(peer, peer.split())

    def refused(self, address: str, why: str) -> None:
        """A connection dropped before it proved the key: an event for the first few,
        then a count a minute (a flood must not fill the disk)."""
        told = self.refusals
        told["count"] = told.get("count", 0) + 1
        if told["count"] <= SV_REFUSALS_LOGGED:
            self.event("refused", peer=address, why=why)
            return
        since = told.setdefault("since_told", {})
        since[why] = since.get(why, 0) + 1
        if time.time() - told.get("told_at", 0.0) >= 60.0:
            self.event("refused-more", total=told["count"], why=since)
            told["since_told"], told["told_at"] = {}, time.time()

    def answer_challenge(self, peer: SvPeer, lines: list[bytes]) -> list[bytes] | None:
        """A follower's link to the leader: the first line is the listener's challenge.
        The proof goes back, then what waited in the outbox; the lines after it are
        the leader's. None when the link was dropped or the challenge has not come."""
        if not lines:
            if len(peer.buffer) > GUARDED_PROOF_MAX:
                self.drop(peer, "no challenge from the leader's port")
                return None
            return []
        proof = guarded_answer(self.secret, self.job_id, lines[0])
        if proof is None:
            peer.closed = False  # not the leader's supervisor: not a sign it ended
            self.drop(peer, "no challenge from the leader's port")
            return None
        peer.authed = True
        for data in [proof, *peer.outbox]:
            if not peer.send(data):
                self.drop(peer, "send failed")
                return None
        peer.outbox = []
        return lines[1:]
