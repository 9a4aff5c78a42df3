"""Every TCP listener of ours on a host: nobody but a holder of the job's key gets in.

Another user of the host (or of its network) can reach any port we listen on. So a
listener here, as sshd does with ``MaxStartups`` and ``LoginGraceTime``:

- sends each new connection a fresh random challenge and wants back, within
  ``GUARDED_AUTH_S``, one line with the HMAC-SHA256 of it under the job's key (the
  per-job secret the console wrote 0600 with the job; it never travels in argv); a wrong
  proof, a line over ``GUARDED_PROOF_MAX`` bytes or silence drops the connection;
- keeps at most ``GUARDED_MAX_PENDING`` unauthenticated connections: a new one drops the
  oldest, so idle connections cost nothing lasting and a real peer that answers at once
  still gets in;
- reads through ``selectors`` (epoll where there is one), never ``select()``, which
  cannot take a descriptor >= 1024, and raises its own RLIMIT_NOFILE soft limit to the
  hard one (``guarded_raise_nofile``);
- listens on the address the job's hosts use to reach this one, not every address,
  when that address is one of this host's (``GuardedListener.listen``).

What happens after the proof (the supervisors' signed lines, ``supervisor/wire.py``) is
the owner's: it gets the authenticated socket and the bytes read past the proof.

A part of the supervisor's single source (``supervisor/source.py``): standard library
only, Python >= 3.7, names prefixed ``guarded_``/``Guarded``.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any

GUARDED_AUTH_S = 5.0  # a peer proves it holds the key within this, or is dropped
GUARDED_MAX_PENDING = 8  # unauthenticated connections kept at once; the oldest goes first
GUARDED_PROOF_MAX = 256  # bytes an unauthenticated peer may send: its one proof line
GUARDED_ACCEPT_BATCH = 64  # accepts per wake-up, so a connect flood never starves the loop
GUARDED_BACKLOG = 128

# (socket, "address:port", the bytes read past the proof line)
GuardedOnPeer = Callable[[socket.socket, str, bytes], None]
GuardedOnRefused = Callable[[str, str], None]  # ("address:port", why)


def guarded_raise_nofile() -> int:
    """Raise this process's soft descriptor limit to its hard one; the soft limit now."""
    try:
        import resource
    except ImportError:  # not on this platform: nothing to raise
        return -1
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return int(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    except (ValueError, OSError):  # a container's limits may refuse: keep what we have
        return -1


def guarded_proof(secret: bytes, context: str, challenge: str) -> str:
    """The answer to ``challenge``: only a holder of ``secret`` can compute it. The
    context (the job id) keeps a proof for one job from serving another."""
    text = f"distconsole-guarded-listener\n{context}\n{challenge}"
    return hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()


def guarded_challenge_line(challenge: str) -> bytes:
    return (json.dumps({"challenge": challenge}) + "\n").encode()


def guarded_answer(secret: bytes, context: str, line: bytes) -> bytes | None:
    """The connecting side: the proof line for a listener's challenge line, or None
    when ``line`` is no challenge."""
    try:
        challenge = json.loads(line.decode("utf-8", "replace")).get("challenge")
    except (ValueError, AttributeError):
        return None
    if not isinstance(challenge, str) or not challenge:
        return None
    return (json.dumps({"proof": guarded_proof(secret, context, challenge)}) + "\n").encode()


class GuardedPending:
    """A connection that has not proved it holds the key yet."""

    def __init__(self, sock: socket.socket, address: str, now: float) -> None:
        self.sock = sock
        self.address = address
        self.since = now
        self.challenge = os.urandom(16).hex()
        self.buffer = b""


class GuardedListener:
    """A listening socket whose connections reach ``on_peer`` only once authenticated.

    It registers its sockets with the owner's ``selector``; each key's data is a
    callable the owner's loop calls when that socket is ready (``guarded_dispatch``).
    """

    def __init__(
        self,
        selector: selectors.BaseSelector,
        secret: bytes,
        context: str,
        on_peer: GuardedOnPeer,
        on_refused: GuardedOnRefused,
        *,
        auth_s: float = GUARDED_AUTH_S,
        max_pending: int = GUARDED_MAX_PENDING,
    ) -> None:
        self.selector = selector
        self.secret = secret
        self.context = context
        self.on_peer = on_peer
        self.on_refused = on_refused
        self.auth_s = auth_s
        self.max_pending = max(1, max_pending)
        self.sock: socket.socket | None = None
        self.pending: list[GuardedPending] = []  # oldest first
        self.refused = 0  # connections dropped before they proved the key
        self.bound_why = ""  # why it listens on every address, when it does

    def listen(self, address: str, port: int) -> tuple[str, int]:
        """Listen on ``address`` (the one the job's hosts use to reach this host); every
        address only when that one is unknown or not this host's. Returns (host, port)."""
        sock: socket.socket | None = None
        if address:
            try:
                infos = socket.getaddrinfo(address, port, 0, socket.SOCK_STREAM)
            except (OSError, UnicodeError) as exc:
                infos = []
                self.bound_why = f"{address!r} does not resolve here ({exc})"
            for family, kind, proto, _name, where in infos:
                candidate = socket.socket(family, kind, proto)
                try:
                    candidate.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    candidate.bind(where)
                except OSError as exc:
                    candidate.close()
                    self.bound_why = f"{address!r} is not an address of this host ({exc})"
                    continue
                sock = candidate
                self.bound_why = ""
                break
        else:
            self.bound_why = "no address of this host is known to the job's hosts"
        if sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("", port))
        sock.listen(GUARDED_BACKLOG)
        sock.setblocking(False)
        self.sock = sock
        self.selector.register(sock, selectors.EVENT_READ, self.accept)
        bound = sock.getsockname()
        return str(bound[0]), int(bound[1])

    def accept(self) -> None:
        assert self.sock is not None
        for _turn in range(GUARDED_ACCEPT_BATCH):
            try:
                sock, where = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and friends: the next wake-up tries again
                self.on_refused("listener", f"accept failed ({exc})")
                return
            address = f"{where[0]}:{where[1]}"
            while len(self.pending) >= self.max_pending:
                self.refuse(self.pending[0], "too many unauthenticated connections")
            sock.setblocking(False)
            pending = GuardedPending(sock, address, time.time())
            try:
                sock.send(guarded_challenge_line(pending.challenge))
            except OSError:
                sock.close()
                continue
            self.pending.append(pending)
            self.selector.register(sock, selectors.EVENT_READ, lambda p=pending: self.read(p))

    def read(self, pending: GuardedPending) -> None:
        try:
            data = pending.sock.recv(GUARDED_PROOF_MAX + 1)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.refuse(pending, f"connection failed before its proof ({exc})")
            return
        if not data:
            self.refuse(pending, "closed before its proof")
            return
        pending.buffer += data
        if b"\n" not in pending.buffer:
            if len(pending.buffer) > GUARDED_PROOF_MAX:
                self.refuse(pending, f"sent over {GUARDED_PROOF_MAX} bytes without a proof")
            return
        line, rest = pending.buffer.split(b"\n", 1)
        if len(line) > GUARDED_PROOF_MAX or not self.proved(pending, line):
            self.refuse(pending, "no proof of the job's key")
            return
        self.forget(pending)
        self.on_peer(pending.sock, pending.address, rest)

    def proved(self, pending: GuardedPending, line: bytes) -> bool:
        try:
            proof = json.loads(line.decode("utf-8", "replace")).get("proof")
        except (ValueError, AttributeError):
            return False
        expected = guarded_proof(self.secret, self.context, pending.challenge)
        return isinstance(proof, str) and hmac.compare_digest(proof, expected)

    def expire(self, now: float | None = None) -> None:
        """Drop connections that did not prove the key in time (call it often)."""
        now = time.time() if now is None else now
        for pending in [p for p in self.pending if now - p.since > self.auth_s]:
            self.refuse(pending, f"no proof within {self.auth_s:g} s")

    def refuse(self, pending: GuardedPending, why: str) -> None:
        self.refused += 1
        self.forget(pending)
        with contextlib.suppress(OSError):
            pending.sock.close()
        self.on_refused(pending.address, why)

    def forget(self, pending: GuardedPending) -> None:
        with contextlib.suppress(ValueError):
            self.pending.remove(pending)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(pending.sock)

    def close(self) -> None:
        for pending in list(self.pending):
            self.forget(pending)
            with contextlib.suppress(OSError):
                pending.sock.close()
        if self.sock is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(self.sock)
            self.sock.close()
            self.sock = None


def guarded_dispatch(selector: selectors.BaseSelector, timeout: float) -> None:
    """Wait up to ``timeout`` and call each ready socket's callable. A callable may drop
    other sockets ready in the same round: those are skipped (their key is gone)."""
    ready = selector.select(timeout)
    registered = selector.get_map()
    for key, _events in ready:
        if registered.get(key.fd) is key:
            handler: Any = key.data
            handler()
