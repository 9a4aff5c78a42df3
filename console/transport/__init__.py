"""How a command reaches a host: ssh (asyncssh), local (subprocess), and the pool."""

from __future__ import annotations

from console.transport.base import (
    Command,
    CommandResult,
    HostConnection,
    HostState,
    HostStatus,
    RemoteProcess,
    to_shell,
    with_env,
)
from console.transport.local import LocalConnection
from console.transport.pool import ClusterConnections
from console.transport.ssh import SshConnection

__all__ = [
    "ClusterConnections",
    "Command",
    "CommandResult",
    "HostConnection",
    "HostState",
    "HostStatus",
    "LocalConnection",
    "RemoteProcess",
    "SshConnection",
    "to_shell",
    "with_env",
]
