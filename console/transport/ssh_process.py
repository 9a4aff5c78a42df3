"""A command started on a host over SSH: its streams, stdin, exit status (asyncssh).

:class:`SshRemoteProcess` is what :meth:`SshConnection.start` returns; :func:`kill` and
:func:`exit_code` are shared with :meth:`SshConnection.run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from typing import Any, Protocol

import asyncssh

from console.errors import TransportError
from console.inventory import Host
from console.transport.base import RemoteProcess
from console.transport.hello import OutputStart
from console.transport.streams import StderrTail


class ProcessOwner(Protocol):
    """What a process needs of its connection (:class:`~console.transport.ssh.SshConnection`):
    its host for messages, and being told that the link carried data."""

    @property
    def host(self) -> Host: ...
    def touch(self) -> None: ...


# Read size for byte streams: asyncssh hands over what is buffered, up to this much.
CHUNK_BYTES = 1 << 18


class SshRemoteProcess(RemoteProcess):
    def __init__(
        self,
        connection: ProcessOwner,
        process: asyncssh.SSHClientProcess[Any],
        start: OutputStart | None = None,
    ) -> None:
        self._connection = connection
        self._process = process
        self._start = start  # skips what the login shell printed before our output
        self._binary = False  # set by start_bytes: the channel carries bytes, not str
        self.stderr = StderrTail()
        self._stderr_task = asyncio.create_task(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        # Unread stderr would fill the channel window and stall the remote process.
        with contextlib.suppress(asyncssh.Error, OSError, asyncio.IncompleteReadError):
            async for chunk in self._process.stderr:
                self.stderr.add(
                    chunk.decode("utf-8", "replace") if isinstance(chunk, bytes) else chunk
                )

    async def lines(self) -> AsyncIterator[str]:
        start = self._start
        try:
            while line := await self._process.stdout.readline():  # "" only at EOF
                self._connection.touch()
                if isinstance(line, bytes):
                    line = line.decode("utf-8", "replace")
                if start is not None and not start.found:
                    for own in _lines(start.feed(line.encode())):
                        yield own
                    continue
                yield line.rstrip("\n")
        except (asyncssh.Error, OSError, asyncio.IncompleteReadError):
            pass  # the connection dropped: the stream simply ends
        if start is not None:
            for own in _lines(start.end()):
                yield own

    async def chunks(self) -> AsyncIterator[bytes]:
        if not self._binary:
            raise TransportError(f"{self._connection.host.name}: not started for bytes")
        resume_when_drained(self._process)
        start = self._start
        try:
            while data := await self._process.stdout.read(CHUNK_BYTES):  # b"" only at EOF
                self._connection.touch()
                if start is not None and not start.found:
                    data = start.feed(data)
                if data:
                    yield data
        except (asyncssh.Error, OSError, asyncio.IncompleteReadError):
            pass  # the connection dropped: the stream simply ends
        if start is not None and (rest := start.end()):
            yield rest

    async def write(self, data: str) -> None:
        try:
            self._process.stdin.write(data.encode() if self._binary else data)
            await self._process.stdin.drain()
        except (asyncssh.Error, OSError) as exc:
            raise TransportError(f"{self._connection.host.name}: cannot write: {exc}") from exc

    def write_eof(self) -> None:
        with contextlib.suppress(asyncssh.Error, OSError):
            self._process.stdin.write_eof()

    async def wait(self) -> int | None:
        try:
            await self._process.wait_closed()
        except (asyncssh.Error, OSError):
            return None
        await asyncio.gather(self._stderr_task, return_exceptions=True)
        return exit_code(self._process)

    def close(self) -> None:
        self._process.close()
        self._stderr_task.cancel()


def _lines(data: bytes) -> list[str]:
    """``data`` as readline would have split it (on newlines only)."""
    parts = data.decode("utf-8", "replace").split("\n")
    return parts[:-1] if parts[-1] == "" else parts


def resume_when_drained(process: asyncssh.SSHClientProcess[Any]) -> None:
    """Keep what a reader that falls behind leaves in the console bounded (two windows).

    asyncssh pauses a channel whose stream holds a window (2 MiB) unread and resumes it
    as soon as a read leaves less. On resuming it sends the peer a whole window again
    while the channel still holds what arrived during the pause, delivers one packet,
    and pauses again: every read added a window of buffered data (70 MiB seen under a
    log firehose). Resumed only once the stream is empty, the channel's buffer is all
    delivered at once and the data waits in the host's files instead."""
    base = process._should_pause_reading

    def should_pause() -> bool:
        if process._read_paused:
            return process._recv_buf_len > 0 or base()
        return base()

    if hasattr(process, "_read_paused") and hasattr(process, "_recv_buf_len"):
        process._should_pause_reading = should_pause  # type: ignore[method-assign]


def kill(process: asyncssh.SSHClientProcess[str]) -> None:
    # sshd forwards signals to non-root sessions; closing the channel alone would leave
    # a command without a terminal running on the host.
    with contextlib.suppress(asyncssh.Error, OSError):
        process.send_signal("KILL")
    process.close()


def exit_code(process: asyncssh.SSHClientProcess[Any]) -> int | None:
    """The exit status, 128+N for a command killed by signal N (as a shell, and the local
    transport, report it; asyncssh reports -1 then), None when neither came."""
    if process.exit_signal is not None:
        return 128 + _signal_number(process.exit_signal[0])
    return process.exit_status


def _signal_number(name: str) -> int:
    try:
        return int(signal.Signals[f"SIG{name}"])
    except KeyError:
        return 0
