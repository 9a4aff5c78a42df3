"""What the app consumes from the core, typed structurally so screens can be shown without it.

The real source is :class:`console.transport.pool.ClusterConnections`; the app only needs
the part of it described by :class:`HostStatusSource`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

from console.inventory import Inventory
from console.transport.base import HostConnection, HostStatus


class HostStatusSource(Protocol):
    async def start(self) -> None: ...

    def subscribe(self) -> AsyncIterator[HostStatus]: ...

    def statuses(self) -> Mapping[str, HostStatus] | Any: ...

    async def close(self) -> None: ...

    def reconnect_now(self, name: str | None = None) -> None: ...

    def __getitem__(self, name: str) -> HostConnection: ...


ConnectionsFactory = Callable[[Inventory], HostStatusSource]


def cluster_connections(inventory: Inventory) -> HostStatusSource:
    """The real connection pool (imported late: the UI module loads before asyncssh is needed)."""
    from console.transport.pool import ClusterConnections

    connections: HostStatusSource = ClusterConnections(inventory)
    return connections
