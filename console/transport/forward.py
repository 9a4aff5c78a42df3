"""Local ports forwarded over the hosts' existing SSH connections (``ssh -L``, without
a second login): TensorBoard, a Ray dashboard or Jupyter on a node, on 127.0.0.1 here.

:class:`PortForwards` holds the live ones for one pool; each listens on 127.0.0.1 only.
A forward lives until it is closed or the pool closes (the console quits). When its
host's connection drops, asyncssh closes the listener with it: the forward then waits
(``waiting``, with the reason) for the pool to reconnect and listens again on the same
local port, as ``autossh`` would, so a browser tab left on it works again. It ends
(``ended``, kept until removed so a screen can say what happened) only when it cannot
come back: its local port taken meanwhile, or ``reconnect=False``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from console.errors import ConsoleError, HostUnavailable
from console.transport.base import PortListener
from console.transport.pool import ClusterConnections

DEFAULT_DEST = "localhost"  # the far end as the host itself sees it
REOPEN_POLL_S = 0.25  # how often a waiting forward looks whether its host is back
STALE_UP_S = 5.0  # an "up" older than the drop is trusted again after this long


class ForwardError(ConsoleError):
    """A forward that could not be opened (bad target, port taken, host down)."""


@dataclass(frozen=True, slots=True)
class Forward:
    host: str  # the inventory host whose connection carries it
    dest_host: str  # as that host resolves it
    dest_port: int
    local_port: int  # on 127.0.0.1
    opened: float
    ended: str | None = None  # why it no longer forwards; None while it lives
    waiting: str | None = None  # why it waits for its host to come back; None when listening

    @property
    def live(self) -> bool:
        return self.ended is None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.local_port}/"

    def text(self) -> str:
        far = f"{self.dest_host}:{self.dest_port}"
        where = far if self.dest_host == DEFAULT_DEST else f"{far} (as {self.host} sees it)"
        line = f"127.0.0.1:{self.local_port} -> {self.host} {where}"
        if not self.live:
            return f"{line}: ended ({self.ended})"
        if self.waiting:
            return f"{line}: waiting for {self.host} to come back ({self.waiting})"
        return line


def parse_target(text: str) -> tuple[str, str, int]:
    """``HOST:PORT`` or ``HOST:DEST:PORT`` -> (host, dest host, port)."""
    parts = text.rsplit(":", 2)
    if len(parts) == 2:
        parts.insert(1, DEFAULT_DEST)
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise ValueError(f"not HOST:PORT or HOST:DEST:PORT: {text!r}")
    host, dest, port_text = parts
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"not a port number: {port_text!r}") from None
    if not 1 <= port <= 65535:
        raise ValueError(f"port out of range: {port}")
    return host, dest, port


class PortForwards:
    def __init__(
        self,
        pool: ClusterConnections,
        on_change: Callable[[], None] | None = None,
        *,
        reconnect: bool = True,
    ) -> None:
        self.pool = pool
        self.on_change = on_change
        self.reconnect = reconnect
        self._forwards: dict[int, Forward] = {}  # by local port
        self._listeners: dict[int, PortListener] = {}
        self._watches: dict[int, asyncio.Task[None]] = {}

    def forwards(self) -> list[Forward]:
        return list(self._forwards.values())

    def live(self) -> list[Forward]:
        return [f for f in self._forwards.values() if f.live]

    async def open(
        self, host: str, dest_port: int, *, dest_host: str = DEFAULT_DEST, local_port: int = 0
    ) -> Forward:
        if host not in {h.name for h in self.pool.hosts}:
            raise ForwardError(f"no host {host!r} in the inventory")
        if local_port in self._forwards and self._forwards[local_port].live:
            raise ForwardError(f"127.0.0.1:{local_port} already forwards")
        try:
            listener = await self.pool[host].forward_local_port(local_port, dest_host, dest_port)
        except ConsoleError as exc:
            raise ForwardError(f"forward to {host}:{dest_port}: {exc}") from exc
        port = listener.get_port()
        forward = Forward(host, dest_host, dest_port, port, time.time())
        self._forwards[port] = forward
        self._listeners[port] = listener
        self._watches[port] = asyncio.create_task(
            self._watch(port, listener), name=f"forward:{host}:{port}"
        )
        self._changed()
        return forward

    async def close(self, local_port: int) -> None:
        listener = self._listeners.pop(local_port, None)
        watch = self._watches.pop(local_port, None)
        if watch is not None:
            watch.cancel()
        if listener is not None:
            listener.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(listener.wait_closed(), 2)
        if self._forwards.pop(local_port, None) is not None:
            self._changed()

    async def close_all(self) -> None:
        for port in list(self._forwards):
            await self.close(port)

    async def wait_ended(self, local_port: int) -> Forward:
        """Until the forward on ``local_port`` ends (it could not come back)."""
        watch = self._watches.get(local_port)
        if watch is not None:
            await asyncio.shield(watch)
        return self._forwards[local_port]

    async def _watch(self, port: int, listener: PortListener | None) -> None:
        while listener is not None:
            await listener.wait_closed()
            self._listeners.pop(port, None)
            forward = self._forwards.get(port)
            if forward is None or not forward.live:
                return
            why = self._why_closed(forward.host)
            if not self.reconnect:
                self._set(port, replace(forward, ended=why))
                return
            self._set(port, replace(forward, waiting=why))
            listener = await self._reopen(port)

    async def _reopen(self, port: int) -> PortListener | None:
        """Listen on ``port`` again once its host is back; None when it ended instead."""
        dropped = time.time()
        while (forward := self._forwards.get(port)) is not None:
            connection = self.pool[forward.host]
            status = connection.status
            # The listener closes before the pool marks the connection down: an "up"
            # from before the drop is the dead connection (asyncssh would listen on it
            # all the same, and forward nothing). A listener closed on a connection that
            # stays up is tried again after a while.
            fresh = status.since >= dropped or time.time() - dropped > STALE_UP_S
            if status.is_up and fresh:
                try:
                    listener = await connection.forward_local_port(
                        port, forward.dest_host, forward.dest_port
                    )
                except HostUnavailable:
                    pass  # dropped again between the look and the listen: wait on
                except ConsoleError as exc:  # the port was taken meanwhile
                    self._set(port, replace(forward, waiting=None, ended=str(exc)))
                    return None
                else:
                    self._listeners[port] = listener
                    self._set(port, replace(forward, waiting=None))
                    return listener
            await asyncio.sleep(REOPEN_POLL_S)
        return None

    def _why_closed(self, host: str) -> str:
        status = self.pool[host].status
        why = "its SSH connection closed"
        if not status.is_up:
            why += f": {host} is {status.state.value}"
            why += f" ({status.reason})" if status.reason else ""
        return why

    def _set(self, port: int, forward: Forward) -> None:
        self._forwards[port] = forward
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()
