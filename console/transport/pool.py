"""One connection per host for a whole cluster, with bounded fan-out.

A host that is down is a state in :meth:`ClusterConnections.statuses`; it never
blocks or raises into the work of other hosts.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Iterator, Sequence
from types import TracebackType

from console.errors import CommandTimeout, HostUnavailable, TransportError
from console.inventory import Host, Inventory
from console.transport.base import (
    Command,
    CommandResult,
    HostConnection,
    HostState,
    HostStatus,
)
from console.transport.local import LocalConnection
from console.transport.sessions import SESSION_WAIT_S, SESSIONS_PER_CONNECTION
from console.transport.ssh import CONNECT_GRACE_S, SshConnection

RunOutcome = CommandResult | HostUnavailable | CommandTimeout | TransportError


class ClusterConnections:
    """Connections to every host of an inventory (see the module doc)."""

    def __init__(
        self,
        inventory_or_hosts: Inventory | Sequence[Host],
        *,
        max_parallel: int = 32,
        reconnect: bool = True,
        ssh_config: Sequence[str] | None = None,
        sessions_per_host: int = SESSIONS_PER_CONNECTION,
        session_wait_s: float = SESSION_WAIT_S,
    ) -> None:
        """``sessions_per_host``: channels open at once on one host's connection (more
        wait in line; sshd's MaxSessions is 10 by default), ``session_wait_s``: how long
        one may wait before failing with what holds them (console.transport.sessions)."""
        if max_parallel < 1:
            raise ValueError("max_parallel must be at least 1")
        hosts = (
            inventory_or_hosts.hosts
            if isinstance(inventory_or_hosts, Inventory)
            else tuple(inventory_or_hosts)
        )
        names = [h.name for h in hosts]
        if len(set(names)) != len(names):
            raise ValueError(f"host names must be unique: {names}")
        self.hosts: tuple[Host, ...] = tuple(hosts)
        self.max_parallel = max_parallel
        self._semaphore = asyncio.Semaphore(max_parallel)
        self._changed = asyncio.Condition()
        self._subscribers: list[asyncio.Queue[HostStatus | None]] = []
        self._connections: dict[str, HostConnection] = {}
        for host in self.hosts:
            if host.is_local:
                self._connections[host.name] = LocalConnection(host)
            else:
                self._connections[host.name] = SshConnection(
                    host,
                    semaphore=self._semaphore,
                    reconnect=reconnect,
                    on_status=self._publish,
                    ssh_config=ssh_config,
                    sessions=sessions_per_host,
                    session_wait_s=session_wait_s,
                )
        self._started = False
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Begin connecting every host in the background; returns at once."""
        if self._started:
            return
        self._started = True
        for connection in self._connections.values():
            if isinstance(connection, SshConnection):
                connection.begin()

    async def close(self) -> None:
        self._closed = True
        await asyncio.gather(
            *(c.close() for c in self._connections.values()), return_exceptions=True
        )
        for queue in self._subscribers:
            queue.put_nowait(None)

    async def __aenter__(self) -> ClusterConnections:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- state ---------------------------------------------------------------------------

    def _publish(self, status: HostStatus) -> None:
        for queue in self._subscribers:
            queue.put_nowait(status)
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def statuses(self) -> dict[str, HostStatus]:
        return {name: c.status for name, c in self._connections.items()}

    def settle_timeout(self) -> float:
        """How long connecting every host may take: the slowest connect_timeout per wave
        of ``max_parallel`` hosts, plus a little."""
        remote = [h for h in self.hosts if not h.is_local]
        if not remote:
            return 0.0
        waves = math.ceil(len(remote) / self.max_parallel)
        return waves * (max(h.connect_timeout for h in remote) + CONNECT_GRACE_S) + 0.5

    async def wait_settled(self, timeout: float | None = None) -> dict[str, HostStatus]:
        """Wait until no host is ``connecting`` (at most ``timeout``, default
        :meth:`settle_timeout`); returns the statuses either way."""
        await self.start()
        limit = self.settle_timeout() if timeout is None else timeout

        def settled() -> bool:
            return all(s.state is not HostState.CONNECTING for s in self.statuses().values())

        async with self._changed:
            # On timeout callers read the hosts still `connecting` from the result.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait_for(settled), limit)
        return self.statuses()

    async def subscribe(self) -> AsyncIterator[HostStatus]:
        """Every host's current status, then every change, until :meth:`close`."""
        queue: asyncio.Queue[HostStatus | None] = asyncio.Queue()
        for status in self.statuses().values():
            queue.put_nowait(status)
        if self._closed:
            queue.put_nowait(None)
        self._subscribers.append(queue)
        try:
            while (item := await queue.get()) is not None:
                yield item
        finally:
            self._subscribers.remove(queue)

    def reconnect_now(self, name: str | None = None) -> None:
        """Retry now instead of after the back-off (one host, or every host not up)."""
        for connection in self._connections.values():
            if isinstance(connection, SshConnection) and name in (None, connection.host.name):
                connection.reconnect_now()

    # -- access --------------------------------------------------------------------------

    def __getitem__(self, name: str) -> HostConnection:
        try:
            return self._connections[name]
        except KeyError:
            known = ", ".join(self._connections)
            raise KeyError(f"no host named {name!r} (hosts: {known})") from None

    def __contains__(self, name: object) -> bool:
        return name in self._connections

    def __iter__(self) -> Iterator[str]:
        return iter(self._connections)

    async def run_all(
        self,
        command: Command,
        timeout: float | None = 30.0,
        *,
        names: Sequence[str] | None = None,
    ) -> dict[str, RunOutcome]:
        """Run ``command`` on every host (or ``names``) at once; never raises for a host:
        each value is a result or the error for that host."""
        chosen = list(names) if names is not None else list(self._connections)

        async def one(name: str) -> RunOutcome:
            try:
                return await self[name].run(command, timeout=timeout)
            except TransportError as exc:
                return exc

        outcomes = await asyncio.gather(*(one(n) for n in chosen))
        return dict(zip(chosen, outcomes, strict=True))
