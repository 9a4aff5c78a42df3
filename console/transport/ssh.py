"""One host over SSH (asyncssh): connect, stay connected, measure the latency.

The connection is kept by a background task: connect (bounded by the pool's
semaphore), wait until it drops, reconnect with exponential backoff and jitter. Every
outcome is a :class:`HostStatus`; nothing here raises into other hosts' work. Running
and starting commands over it is the base class's part (``ssh_commands.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import asyncssh

from console.inventory import Host
from console.transport.base import HostState, HostStatus
from console.transport.connect_errors import describe_connect_error
from console.transport.connect_options import cipher_preference, known_hosts_file
from console.transport.sessions import SESSION_WAIT_S, SESSIONS_PER_CONNECTION, SessionLimiter
from console.transport.ssh_commands import SshCommands

KEEPALIVE_COUNT_MAX = 3

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
# A key the server refuses will not start working by itself; retry rarely.
AUTH_RETRY_S = 60.0
# Grace on top of connect_timeout for asyncio.wait_for around the whole handshake.
CONNECT_GRACE_S = 0.5
# The OpenSSH keepalive request (what ServerAliveInterval sends): every server answers it.
KEEPALIVE_REQUEST = b"keepalive@openssh.com"

StatusListener = Callable[[HostStatus], None]


def backoff_delay(
    attempt: int, *, first: float = BACKOFF_FIRST_S, cap: float = BACKOFF_MAX_S
) -> float:
    """Delay before retry ``attempt`` (0-based): doubling from ``first`` up to ``cap``,
    with +-25 % jitter so that many hosts lost together do not retry in lockstep."""
    base = min(cap, first * (2**attempt))
    return base * random.uniform(0.75, 1.25)


class _Client(asyncssh.SSHClient):
    """Remembers why the connection ended (keepalive timeout, reset, server exit)."""

    def __init__(self) -> None:
        self.lost_reason: str | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            self.lost_reason = str(exc) or type(exc).__name__


class SshConnection(SshCommands):
    """One host's asyncssh connection, kept up by :meth:`maintain` (see the module doc)."""

    def __init__(
        self,
        host: Host,
        *,
        semaphore: asyncio.Semaphore | None = None,
        reconnect: bool = True,
        on_status: StatusListener | None = None,
        ssh_config: Sequence[str] | None = None,
        sessions: int = SESSIONS_PER_CONNECTION,
        session_wait_s: float = SESSION_WAIT_S,
    ) -> None:
        self.host = host
        # sshd refuses channels past MaxSessions (10 by default): every command and
        # started program of this connection takes one of these first.
        self.sessions = SessionLimiter(host.name, sessions, wait_s=session_wait_s)
        self._releasers: set[asyncio.Task[None]] = set()
        # None: asyncssh reads ~/.ssh/config when it exists, like OpenSSH.
        self._ssh_config = list(ssh_config) if ssh_config is not None else None
        self._semaphore = semaphore or asyncio.Semaphore(1)
        self._reconnect = reconnect
        self._on_status = on_status
        self._status = HostStatus(host.name, HostState.CONNECTING, "not connected yet")
        self._conn: asyncssh.SSHClientConnection | None = None
        self._client = _Client()
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._closed = False

    # -- state ---------------------------------------------------------------------------

    @property
    def status(self) -> HostStatus:
        return self._status

    def _set(self, state: HostState, reason: str = "", latency_ms: float | None = None) -> None:
        old = self._status
        if state is old.state and reason == old.reason and latency_ms is None:
            return
        now = time.time()
        self._status = HostStatus(
            name=self.host.name,
            state=state,
            reason=reason,
            latency_ms=latency_ms if latency_ms is not None else old.latency_ms,
            since=old.since if state is old.state else now,
            last_seen=now if state is HostState.UP else old.last_seen,
        )
        if self._on_status is not None:
            self._on_status(self._status)

    def touch(self) -> None:
        """The host just answered: refresh ``last_seen`` without announcing a change."""
        s = self._status
        self._status = HostStatus(s.name, s.state, s.reason, s.latency_ms, s.since, time.time())

    # -- connecting ----------------------------------------------------------------------

    def _connect_options(self) -> dict[str, Any]:
        host = self.host
        options: dict[str, Any] = {
            "connect_timeout": host.connect_timeout,
            "keepalive_interval": host.keepalive_interval,
            "keepalive_count_max": KEEPALIVE_COUNT_MAX,
        }
        # Leave unset what the inventory leaves unset, so ~/.ssh/config (loaded by
        # asyncssh by default) supplies Port, User, IdentityFile, ProxyJump.
        if self._ssh_config is not None:
            options["config"] = self._ssh_config
        if host.port is not None:
            options["port"] = host.port
        if host.user is not None:
            options["username"] = host.user
        if host.identity_file is not None:
            options["client_keys"] = [os.path.expanduser(host.identity_file)]
        if host.insecure_host_keys:
            options["known_hosts"] = None
        elif host.known_hosts is not None:
            options["known_hosts"] = known_hosts_file(os.path.expanduser(host.known_hosts))
        if host.proxy_jump is not None:
            options["tunnel"] = host.proxy_jump
        ciphers = cipher_preference(self._ssh_config)
        if ciphers is not None:
            options["encryption_algs"] = ciphers
        return options

    async def connect_once(self) -> HostStatus:
        """One connection attempt; the outcome is the new status (never raises)."""
        host = self.host
        client = _Client()
        started = time.monotonic()
        try:
            options = self._connect_options()
            conn, _ = await asyncio.wait_for(
                asyncssh.create_connection(lambda: client, host.address, **options),
                host.connect_timeout + CONNECT_GRACE_S,
            )
        except Exception as exc:  # every failure is a state, never a crash of the pool
            state, reason = describe_connect_error(exc, host)
            self._set(state, reason)
            return self._status
        self._conn = conn
        self._client = client
        self._set(HostState.UP, "", latency_ms=(time.monotonic() - started) * 1000)
        return self._status

    async def round_trip_ms(self) -> float | None:
        """Time one keepalive request takes to be answered (the connection's latency
        now), None when not connected. No channel and no process on the host: a
        session would count against sshd's MaxSessions and spawn a shell each time."""
        conn = self._conn
        if conn is None or self._status.state is not HostState.UP:
            return None
        started = time.monotonic()
        # asyncssh sends this request for its own keepalives but has no public call
        # for one; a failure reply is still an answer, so any reply is a round trip.
        await conn._make_global_request(KEEPALIVE_REQUEST)
        if conn.is_closed():
            return None  # woken by the connection closing, not by an answer
        return (time.monotonic() - started) * 1000

    async def _measure_latency(self, conn: asyncssh.SSHClientConnection) -> None:
        """While ``conn`` is up: the latency again every keepalive interval (the
        status's ``latency_ms`` would otherwise stay the connect time forever)."""
        interval = self.host.keepalive_interval
        if not interval:
            return  # keepalives off: the user asked for a quiet connection
        while conn is self._conn:
            await asyncio.sleep(interval)
            latency = await self.round_trip_ms()
            if latency is None or conn is not self._conn:
                return
            self._note_latency(latency)

    def _note_latency(self, ms: float) -> None:
        """A fresh round trip, kept without an announcement (as :meth:`touch`): the
        state did not change, and listeners take announcements as state changes (the
        GPU monitor would wake and retry its sampler). Readers of ``status`` see it."""
        s = self._status
        self._status = HostStatus(s.name, s.state, s.reason, ms, s.since, time.time())

    async def maintain(self) -> None:
        """Connect and keep connecting until :meth:`close` (run as a background task)."""
        attempt = 0
        while not self._closed:
            async with self._semaphore:
                if self._closed:
                    return
                status = await self.connect_once()
            if status.state is HostState.UP and self._conn is not None:
                attempt = 0
                latency = asyncio.create_task(self._measure_latency(self._conn))
                try:
                    await self._conn.wait_closed()
                finally:
                    latency.cancel()
                    await asyncio.gather(latency, return_exceptions=True)
                self._conn = None
                if self._closed:
                    return
                lost = self._client.lost_reason or "the server closed the connection"
                self._set(HostState.DOWN, f"connection lost: {lost}")
                delay = backoff_delay(0)
            elif status.state is HostState.HOST_KEY_REJECTED:
                delay = None  # needs the user: wait for reconnect_now()
            elif status.state is HostState.AUTH_FAILED:
                delay = AUTH_RETRY_S
            else:
                delay = backoff_delay(attempt)
                attempt += 1
            if not self._reconnect:
                return
            self._wake.clear()
            # asyncio.timeout, not wait_for: 3.11's wait_for swallows a cancel that
            # arrives as the event is set (reconnect_now while the console closes).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()

    def begin(self) -> None:
        """Start :meth:`maintain` in the background (idempotent)."""
        if self._task is None or self._task.done():
            self._closed = False
            self._task = asyncio.create_task(self.maintain(), name=f"ssh:{self.host.name}")

    def reconnect_now(self) -> None:
        """Skip the current back-off wait (the user fixed a key, or pressed retry)."""
        attempt_pending = self._status.state is not HostState.UP
        if attempt_pending:
            self._wake.set()

    async def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._conn is not None:
            self._conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._conn.wait_closed(), 2)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
