"""The commands of one host's SSH connection: run one to its end, start one, forward a
port. A base of :class:`~console.transport.ssh.SshConnection`, which keeps the
connection up (connect, reconnect, status); this part only uses it, and holds one of
the connection's sessions (``sessions.py``) for each channel it opens.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import asyncssh

from console.errors import CommandTimeout, HostUnavailable, TransportError
from console.transport.base import (
    Command,
    CommandResult,
    HostConnection,
    HostState,
    HostStatus,
    RemoteProcess,
    with_env,
)
from console.transport.hello import OutputStart, marked, marks_in, new_marker, unmarked
from console.transport.sessions import SessionLimiter, SessionSlot
from console.transport.ssh_process import SshRemoteProcess, exit_code, kill

LOOPBACK = "127.0.0.1"  # where forwarded ports listen: this machine only
# sshd refused a session on a live connection: try again after each of these pauses.
OPEN_RETRY_S = (0.05, 0.1, 0.2, 0.4)
CLOSE_WAIT_S = 5.0  # a command's channel closing after its exit status (sshd: at once)


class SshCommands(HostConnection):
    # Held by SshConnection: it connects, and says whether the host is up.
    sessions: SessionLimiter
    _status: HostStatus
    _conn: asyncssh.SSHClientConnection | None
    _releasers: set[asyncio.Task[None]]

    if TYPE_CHECKING:  # provided by SshConnection

        def touch(self) -> None: ...

    def _require(self) -> asyncssh.SSHClientConnection:
        if self._status.state is not HostState.UP or self._conn is None:
            s = self._status
            raise HostUnavailable(self.host.name, s.state.value, s.reason or "not connected")
        return self._conn

    async def forward_local_port(
        self, listen_port: int, dest_host: str, dest_port: int
    ) -> asyncssh.SSHListener:
        """``ssh -L 127.0.0.1:listen_port:dest_host:dest_port`` over this connection
        (direct-tcpip channels: not sessions, so not counted against MaxSessions). The
        listener closes with the connection."""
        conn = self._require()
        try:
            return await conn.forward_local_port(LOOPBACK, listen_port, dest_host, dest_port)
        except OSError as exc:
            raise TransportError(
                f"cannot listen on {LOOPBACK}:{listen_port}: {exc.strerror or exc}"
            ) from exc
        except asyncssh.Error as exc:
            raise TransportError(f"{self.host.name}: port forwarding refused: {exc}") from exc

    def _refused(self, exc: BaseException, conn: asyncssh.SSHClientConnection) -> bool:
        return (
            isinstance(exc, asyncssh.ChannelOpenError)
            and self._status.state is HostState.UP
            and not conn.is_closed()
        )

    async def _create_process(
        self, conn: asyncssh.SSHClientConnection, line: str, **options: Any
    ) -> asyncssh.SSHClientProcess[Any]:
        """``conn.create_process``, tried again a few times when sshd refuses the session
        on a live connection: the budget keeps below MaxSessions, but sshd frees a
        session a moment after its channel closed (measured: 5 % of 200 commands at once
        refused without this)."""
        for pause in (*OPEN_RETRY_S, None):
            try:
                return await conn.create_process(line, **options)
            except asyncssh.ChannelOpenError as exc:
                if pause is None or not self._refused(exc, conn):
                    raise
                await asyncio.sleep(pause)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _unavailable(
        self, exc: BaseException, conn: asyncssh.SSHClientConnection
    ) -> TransportError:
        if isinstance(exc, asyncssh.ChannelOpenError) and self._refused(exc, conn):
            # The connection is fine; sshd refused one more session (MaxSessions). A
            # channel still opening when the connection dies (keepalive timeout) fails
            # with ChannelOpenError too, before maintain() marks the host down: that
            # one is the host being unavailable.
            return TransportError(
                f"{self.host.name}: sshd refused a new session ({exc.reason}); "
                "too many channels open on this connection (sshd MaxSessions)"
            )
        reason = str(exc) or type(exc).__name__
        return HostUnavailable(self.host.name, HostState.DOWN.value, f"connection lost: {reason}")

    async def run(
        self,
        command: Command,
        *,
        timeout: float | None = 30.0,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        self._require()
        marker = new_marker()  # the login shell's greeting, if any, goes before it
        line = marked(with_env(command, env), marker)
        slot = await self.sessions.acquire(unmarked(line))
        try:
            result = await self._run(line, timeout, input)
        finally:
            slot.release()
        stdout = OutputStart(marker, marks_in(line)).text(result.stdout)
        return CommandResult(result.exit_status, stdout, result.stderr, result.duration_s)

    async def _run(self, line: str, timeout: float | None, input: str | None) -> CommandResult:
        conn = self._require()  # again: the host may have gone while this waited in line
        started = time.monotonic()
        try:
            process = await self._create_process(conn, line, encoding="utf-8", errors="replace")
        except (asyncssh.Error, OSError) as exc:
            raise self._unavailable(exc, conn) from exc
        try:
            if input:
                process.stdin.write(input)
            process.stdin.write_eof()
            stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
        except TimeoutError:
            kill(process)
            raise CommandTimeout(self.host.name, unmarked(line), timeout or 0.0) from None
        except (asyncssh.Error, OSError) as exc:
            process.close()
            raise self._unavailable(exc, conn) from exc
        except BaseException:
            kill(process)  # cancelled by the caller: do not leave the command behind
            raise
        self.touch()
        # sshd counts the session until its channel is closed: the caller frees this
        # slot once ours is (our close then reaches sshd before any new open on this
        # connection), or a command let in next could be refused (MaxSessions).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.channel.wait_closed(), CLOSE_WAIT_S)
        exit_status = exit_code(process)
        if exit_status is None:
            # Neither exit-status nor exit-signal: the connection went away.
            raise HostUnavailable(self.host.name, "down", "connection lost while running")
        return CommandResult(exit_status, stdout or "", stderr or "", time.monotonic() - started)

    async def start(
        self, command: Command, *, env: Mapping[str, str] | None = None
    ) -> RemoteProcess:
        marker = new_marker()
        line = marked(with_env(command, env), marker)
        process = await self._open(line, binary=False)
        return SshRemoteProcess(self, process, OutputStart(marker, marks_in(line)))

    async def start_bytes(
        self, command: Command, *, env: Mapping[str, str] | None = None
    ) -> RemoteProcess:
        marker = new_marker()
        line = marked(with_env(command, env), marker)
        process = await self._open(line, binary=True)
        remote = SshRemoteProcess(self, process, OutputStart(marker, marks_in(line)))
        remote._binary = True
        return remote

    async def _open(self, line: str, *, binary: bool) -> asyncssh.SSHClientProcess[Any]:
        """A started command holding one session until its channel closes (it exits,
        its reader closes it, or the connection drops)."""
        self._require()
        slot = await self.sessions.acquire(unmarked(line))
        try:
            conn = self._require()  # again: the host may have gone while this waited
            try:
                if binary:
                    process = await self._create_process(conn, line, encoding=None)
                else:
                    process = await self._create_process(
                        conn, line, encoding="utf-8", errors="replace"
                    )
            except (asyncssh.Error, OSError) as exc:
                raise self._unavailable(exc, conn) from exc
        except BaseException:
            slot.release()
            raise
        releaser = asyncio.create_task(self._release_when_closed(process, slot))
        self._releasers.add(releaser)
        releaser.add_done_callback(self._releasers.discard)
        return process

    @staticmethod
    async def _release_when_closed(
        process: asyncssh.SSHClientProcess[Any], slot: SessionSlot
    ) -> None:
        try:
            await process.channel.wait_closed()
        finally:
            slot.release()
