"""The interface every transport (ssh, local, demo) offers to the rest of the core.

A host that is not up is a *state* (:class:`HostStatus`), never an exception escaping
into other hosts' work. Methods that need the host raise :class:`HostUnavailable`
promptly instead of waiting for a connection that may never come.
"""

from __future__ import annotations

import abc
import enum
import shlex
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from console.errors import TransportError
from console.inventory import Host
from console.names import env_name_problem


class HostState(enum.StrEnum):
    CONNECTING = "connecting"
    UP = "up"
    DOWN = "down"
    AUTH_FAILED = "auth-failed"
    HOST_KEY_REJECTED = "host-key-rejected"


@dataclass(frozen=True, slots=True)
class HostStatus:
    name: str
    state: HostState
    reason: str = ""
    latency_ms: float | None = None  # the last round trip measured (connect, then keepalives)
    since: float = field(default_factory=time.time)  # when this state began (epoch s)
    last_seen: float | None = None  # last time the host answered (epoch s)

    @property
    def is_up(self) -> bool:
        return self.state is HostState.UP


@dataclass(frozen=True, slots=True)
class CommandResult:
    exit_status: int
    stdout: str
    stderr: str
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


Command = str | Sequence[str]


def to_shell(command: Command) -> str:
    """A shell command line; argv sequences are quoted with shlex.join, strings pass as is."""
    return command if isinstance(command, str) else shlex.join(command)


class RemoteProcess(abc.ABC):
    """A long-lived process on a host: stream its stdout lines, feed its stdin."""

    @abc.abstractmethod
    def lines(self) -> AsyncIterator[str]:
        """stdout, one line at a time without the newline; ends when the process exits
        or the connection drops."""

    def chunks(self) -> AsyncIterator[bytes]:
        """stdout as raw bytes, as they come (any split); ends like :meth:`lines`. Only
        for a process from :meth:`HostConnection.start_bytes`."""
        raise TransportError("this process was started for lines, not a byte stream")

    @abc.abstractmethod
    async def write(self, data: str) -> None: ...

    @abc.abstractmethod
    def write_eof(self) -> None: ...

    @abc.abstractmethod
    async def wait(self) -> int | None:
        """Exit status; None when the connection dropped before the process reported one."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop reading and close the channel (does not promise to kill a detached job)."""


class HostConnection(abc.ABC):
    """One host's connection, kept up (reconnects with backoff) by the pool."""

    host: Host

    @property
    @abc.abstractmethod
    def status(self) -> HostStatus: ...

    @abc.abstractmethod
    async def run(
        self,
        command: Command,
        *,
        timeout: float | None = 30.0,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Run a command to completion. Raises HostUnavailable / CommandTimeout."""

    @abc.abstractmethod
    async def start(
        self, command: Command, *, env: Mapping[str, str] | None = None
    ) -> RemoteProcess:
        """Start a long-lived process. Raises HostUnavailable."""

    async def start_bytes(
        self, command: Command, *, env: Mapping[str, str] | None = None
    ) -> RemoteProcess:
        """Like :meth:`start`, with stdout read as bytes through ``chunks()`` (binary
        framing, no decoding or line splitting in the transport). Raises HostUnavailable."""
        raise TransportError(f"{self.host.name}: this transport cannot stream bytes")

    async def forward_local_port(
        self, listen_port: int, dest_host: str, dest_port: int
    ) -> PortListener:
        """Listen on 127.0.0.1:``listen_port`` (0: any free port) and carry each
        connection to ``dest_host:dest_port`` as the host sees it. Raises
        HostUnavailable, TransportError."""
        raise TransportError(f"{self.host.name}: this transport cannot forward ports")

    async def close(self) -> None:  # noqa: B027 - optional hook, nothing to close by default
        """Drop the connection and stop reconnecting."""


class PortListener(Protocol):
    """A forwarded local port (asyncssh's ``SSHListener`` is one)."""

    def get_port(self) -> int: ...

    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


def with_env(command: Command, env: Mapping[str, str] | None) -> str:
    """``command`` as a shell line that first exports ``env`` (values quoted).

    sshd's AcceptEnv refuses most variables, so the environment travels inside the
    command line; ``export`` (not ``env K=V cmd``) so it reaches every part of a
    compound line such as ``cd x && python3 y``.
    """
    line = to_shell(command)
    if not env:
        return line
    for name in env:
        problem = env_name_problem(name)
        if problem:
            raise TransportError(problem)
    assignments = " ".join(f"{name}={shlex.quote(value)}" for name, value in env.items())
    return f"export {assignments}; {line}"
