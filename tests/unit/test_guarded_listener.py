"""The guarded listener every port of ours on a host goes through, on real loopback
sockets: only a holder of the job's key gets in, within the auth window; unauthenticated
connections are capped (the oldest goes) and bounded; descriptors past 1024 work; and a
real leader supervisor's port ignores a forged message (without the key, or badly signed)
and drops its sender."""

from __future__ import annotations

import json
import os
import resource
import selectors
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from console.hostprogs.guarded_listener import (
    GUARDED_PROOF_MAX,
    GuardedListener,
    guarded_answer,
    guarded_dispatch,
    guarded_raise_nofile,
)
from console.hostprogs.supervisor.program import Supervisor
from console.hostprogs.supervisor.wire import wire_pack

KEY = bytes.fromhex("11" * 32)
JOB = "j-guarded"


class Harness:
    """A listener on 127.0.0.1 and what reached its owner."""

    def __init__(self, auth_s: float = 30.0) -> None:
        self.selector = selectors.DefaultSelector()
        self.peers: list[tuple[socket.socket, str, bytes]] = []
        self.refused: list[tuple[str, str]] = []
        self.listener = GuardedListener(
            self.selector,
            KEY,
            JOB,
            lambda sock, address, rest: self.peers.append((sock, address, rest)),
            lambda address, why: self.refused.append((address, why)),
            auth_s=auth_s,
        )
        self.address = self.listener.listen("127.0.0.1", 0)

    def pump(self, until: Callable[[], bool], timeout: float = 30.0) -> None:
        """Run the owner's loop until ``until()`` holds (generous: the machine is shared)."""
        deadline = time.monotonic() + timeout
        while not until():
            assert time.monotonic() < deadline, "condition not reached in time"
            guarded_dispatch(self.selector, 0.05)
            self.listener.expire()

    def connect(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=30)
        self.pump(lambda: any(p.sock.getpeername() == sock.getsockname() for p in self.pending))
        return sock

    @property
    def pending(self) -> list:  # type: ignore[type-arg]
        return self.listener.pending

    def close(self) -> None:
        for sock, _address, _rest in self.peers:
            sock.close()
        self.listener.close()
        self.selector.close()


@pytest.fixture
def harness() -> Iterator[Harness]:
    made = Harness()
    yield made
    made.close()


def challenge_of(sock: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\n"):
        chunk = sock.recv(1)
        assert chunk, "closed before the challenge"
        line += chunk
    return line


def hung_up(sock: socket.socket) -> bool:
    """The listener closed ``sock`` (EOF or a reset), what is still buffered aside."""
    sock.settimeout(30)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def test_a_holder_of_the_key_gets_in_with_what_it_sent_after_its_proof(harness) -> None:
    sock = harness.connect()
    proof = guarded_answer(KEY, JOB, challenge_of(sock))
    assert proof is not None
    sock.sendall(proof + b'{"signed": "hello"}\n{"partial')
    harness.pump(lambda: bool(harness.peers))
    ((_peer, address, rest),) = harness.peers
    assert rest == b'{"signed": "hello"}\n{"partial'
    assert address.startswith("127.0.0.1:") and not harness.pending and not harness.refused
    sock.close()


@pytest.mark.parametrize(
    "first_line",
    [
        pytest.param(lambda c: guarded_answer(b"another key", JOB, c), id="another-key"),
        pytest.param(lambda c: guarded_answer(KEY, "another job", c), id="another-job"),
        # A signed wire message is no proof, even with the key: the challenge comes first.
        pytest.param(lambda c: wire_pack(KEY, JOB, {"type": "stop"}), id="signed-no-proof"),
        pytest.param(lambda c: wire_pack(b"x", JOB, {"type": "stop"}), id="forged-message"),
        pytest.param(lambda c: b'{"proof": "' + b"0" * 64 + b'"}\n', id="guessed-proof"),
    ],
)
def test_no_proof_of_the_key_is_dropped(harness, first_line) -> None:
    sock = harness.connect()
    sock.sendall(first_line(challenge_of(sock)))
    harness.pump(lambda: bool(harness.refused))
    assert harness.refused[0][1] == "no proof of the job's key"
    assert hung_up(sock) and not harness.peers and not harness.pending
    sock.close()


def test_silence_past_the_auth_window_is_dropped() -> None:
    harness = Harness(auth_s=0.3)
    try:
        sock = harness.connect()
        harness.pump(lambda: bool(harness.refused))
        assert harness.refused == [(harness.refused[0][0], "no proof within 0.3 s")]
        assert hung_up(sock) and not harness.peers
        sock.close()
    finally:
        harness.close()


def test_a_newline_less_stream_is_dropped_at_the_bound(harness) -> None:
    sock = harness.connect()
    challenge_of(sock)
    sock.sendall(b"x" * (GUARDED_PROOF_MAX * 4))  # no newline: never a complete line
    harness.pump(lambda: bool(harness.refused))
    assert harness.refused[0][1] == f"sent over {GUARDED_PROOF_MAX} bytes without a proof"
    assert hung_up(sock) and not harness.pending
    sock.close()


def test_the_oldest_unauthenticated_connection_goes_when_the_cap_is_reached(harness) -> None:
    cap = harness.listener.max_pending
    socks = [harness.connect() for _ in range(cap)]
    assert len(harness.pending) == cap and not harness.refused
    newest = harness.connect()
    assert len(harness.pending) == cap
    assert harness.refused == [(harness.refused[0][0], "too many unauthenticated connections")]
    assert harness.refused[0][0] == "{}:{}".format(*socks[0].getsockname())
    assert hung_up(socks[0])
    # The newest still gets in with the key.
    proof = guarded_answer(KEY, JOB, challenge_of(newest))
    assert proof is not None
    newest.sendall(proof)
    harness.pump(lambda: bool(harness.peers))
    for sock in [*socks, newest]:
        sock.close()


def test_descriptors_past_1024_are_served(harness) -> None:
    """With every descriptor below 1024 taken (where select() raises ValueError), 1100
    idle connections come and go and a holder of the key still gets in."""
    if guarded_raise_nofile() < 2600 and resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 2600:
        pytest.skip("RLIMIT_NOFILE's hard limit is below 2600 here")
    fillers = [os.open(os.devnull, os.O_RDONLY) for _ in range(1024)]
    idle: list[socket.socket] = []
    try:
        for _ in range(1100):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(harness.address)
            idle.append(sock)
            if len(idle) % 50 == 0:  # let the listener drain its accept queue
                guarded_dispatch(harness.selector, 0)
        harness.pump(lambda: harness.listener.refused >= 1000)
        assert min(p.sock.fileno() for p in harness.pending) >= 1024
        assert len(harness.pending) == harness.listener.max_pending
        sock = socket.create_connection(harness.address, timeout=30)
        idle.append(sock)
        harness.pump(
            lambda: any(p.sock.getpeername() == sock.getsockname() for p in harness.pending)
        )
        proof = guarded_answer(KEY, JOB, challenge_of(sock))
        assert proof is not None
        sock.sendall(proof)
        harness.pump(lambda: bool(harness.peers))
        assert harness.peers[0][0].fileno() >= 1024
    finally:
        for sock in idle:
            sock.close()
        for fd in fillers:
            os.close(fd)


# -- a real leader supervisor's port ------------------------------------------------------


def leader(tmp_path: Path) -> Supervisor:
    """A real leader supervisor of a two-host job (its processes never started here)."""
    config = {
        "job_id": JOB,
        "host": "node0",
        "leader": "node0",
        "kind": "ddp",
        "bind": "127.0.0.1",
        "processes": [
            {"host": "node0", "name": "torchrun-0", "role": "torchrun"},
            {"host": "node1", "name": "torchrun-1", "role": "torchrun"},
        ],
    }
    (tmp_path / "supervisor-config.json").write_text(json.dumps(config))
    (tmp_path / "supervisor.secret").write_text(KEY.hex())
    sv = Supervisor(str(tmp_path))
    sv.listen()
    return sv


def events(tmp_path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]


def pump(sv: Supervisor, until: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not until():
        assert time.monotonic() < deadline, "condition not reached in time"
        guarded_dispatch(sv.selector, 0.05)


def connect(sv: Supervisor, address: tuple[str, int]) -> socket.socket:
    """A connection the leader has accepted (and challenged)."""
    assert sv.listener is not None
    sock = socket.create_connection(address, timeout=30)
    mine = sock.getsockname()
    pump(sv, lambda: any(p.sock.getpeername() == mine for p in sv.listener.pending))
    return sock


def test_the_leaders_port_ignores_forged_messages_and_drops_their_senders(tmp_path) -> None:
    sv = leader(tmp_path)
    assert sv.listener is not None and sv.listener.sock is not None
    address = sv.listener.sock.getsockname()
    assert address[0] == "127.0.0.1"  # the job's hosts' address, not every address
    hello = wire_pack(KEY, JOB, {"type": "hello", "sender": "node1"})
    signed_stop = wire_pack(KEY, JOB, {"type": "stop", "sender": "node1"})
    forged_stop = wire_pack(b"not the key", JOB, {"type": "stop", "sender": "node1"})
    try:
        # Without the key: a forged stop in place of the proof.
        stranger = connect(sv, address)
        stranger.sendall(forged_stop)
        pump(sv, lambda: any(e["event"] == "refused" for e in events(tmp_path)))
        assert hung_up(stranger) and not sv.peers
        # With the proof (a holder of the key) but a badly signed stop: refused, dropped.
        holder = connect(sv, address)
        holder.sendall(guarded_answer(KEY, JOB, challenge_of(holder)) or b"")
        holder.sendall(hello + forged_stop)
        pump(sv, lambda: len([e for e in events(tmp_path) if e["event"] == "refused"]) == 2)
        assert hung_up(holder) and not sv.peers
        whys = [e["why"] for e in events(tmp_path) if e["event"] == "refused"]
        assert whys == ["no proof of the job's key", "bad signature (not this job's secret)"]
        assert sv.policy.stop_ordered_at is None and sv.policy.verdict is None
        assert not any(e["event"] == "stop-asked" for e in events(tmp_path))
        # The control: the same stop, signed with the key, is the job's own stop.
        peer = connect(sv, address)
        peer.sendall(guarded_answer(KEY, JOB, challenge_of(peer)) or b"")
        # A fresh hello: the first one's nonce is spent (a replay would be refused).
        peer.sendall(wire_pack(KEY, JOB, {"type": "hello", "sender": "node1"}) + signed_stop)
        pump(sv, lambda: any(e["event"] == "stop-asked" for e in events(tmp_path)))
        peer.close()
        for sock in (stranger, holder):
            sock.close()
    finally:
        if sv.listener is not None:
            sv.listener.close()
