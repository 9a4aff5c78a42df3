"""How a command reaches a host: ssh (asyncssh), local (subprocess), and the pool.

The names below are loaded on first use (PEP 562), so importing a plain model such as
``console.transport.base.HostState`` does not load asyncssh.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOME = {
    "Command": "base",
    "CommandResult": "base",
    "HostConnection": "base",
    "HostState": "base",
    "HostStatus": "base",
    "RemoteProcess": "base",
    "to_shell": "base",
    "with_env": "base",
    "LocalConnection": "local",
    "ClusterConnections": "pool",
    "SshConnection": "ssh",
}

__all__ = [  # noqa: RUF022 - grouped by module like _HOME
    "Command",
    "CommandResult",
    "HostConnection",
    "HostState",
    "HostStatus",
    "RemoteProcess",
    "to_shell",
    "with_env",
    "LocalConnection",
    "ClusterConnections",
    "SshConnection",
]


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
