"""The machine the console runs on (``address: local``): commands via ``bash -c``.

Same semantics as the ssh transport: commands are shell lines run from the home
directory, env is exported inside the line, a timeout kills the whole command.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from console.errors import CommandTimeout, TransportError
from console.inventory import Host
from console.transport.base import (
    Command,
    CommandResult,
    HostConnection,
    HostState,
    HostStatus,
    RemoteProcess,
    with_env,
)
from console.transport.streams import StderrTail

SHELL = "/bin/bash"


async def _spawn(line: str) -> asyncio.subprocess.Process:
    # Own session: a timeout or close can signal the command's whole process group.
    return await asyncio.create_subprocess_exec(
        SHELL,
        "-c",
        line,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=str(Path.home()),
        start_new_session=True,
    )


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


class LocalProcess(RemoteProcess):
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process
        self.stderr = StderrTail()
        self._stderr_task = asyncio.create_task(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        assert self._process.stderr is not None
        while chunk := await self._process.stderr.read(65536):
            self.stderr.add(chunk.decode("utf-8", "replace"))

    async def lines(self) -> AsyncIterator[str]:
        assert self._process.stdout is not None
        while raw := await self._process.stdout.readline():
            yield raw.decode("utf-8", "replace").rstrip("\n")

    async def chunks(self) -> AsyncIterator[bytes]:
        assert self._process.stdout is not None
        while data := await self._process.stdout.read(1 << 18):
            yield data

    async def write(self, data: str) -> None:
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(data.encode())
            await self._process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise TransportError(f"local: cannot write: {exc}") from exc

    def write_eof(self) -> None:
        assert self._process.stdin is not None
        with contextlib.suppress(OSError):
            self._process.stdin.close()

    async def wait(self) -> int | None:
        status = await self._process.wait()
        await asyncio.gather(self._stderr_task, return_exceptions=True)
        return status if status >= 0 else 128 - status

    def close(self) -> None:
        # Like closing an ssh channel: the process loses its pipes; a detached job
        # (its own setsid) is not ours to kill.
        with contextlib.suppress(ProcessLookupError):
            self._process.send_signal(signal.SIGHUP)
        self._stderr_task.cancel()
        if self._process.stdin is not None:
            self._process.stdin.close()


class LocalConnection(HostConnection):
    """Always up; the pool treats it like any other host."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._status = HostStatus(host.name, HostState.UP, "local", latency_ms=0.0)

    @property
    def status(self) -> HostStatus:
        return self._status

    def touch(self) -> None:
        s = self._status
        self._status = HostStatus(s.name, s.state, s.reason, s.latency_ms, s.since, time.time())

    async def run(
        self,
        command: Command,
        *,
        timeout: float | None = 30.0,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        line = with_env(command, env)
        started = time.monotonic()
        process = await _spawn(line)
        try:
            stdout, stderr = await asyncio.wait_for(
                process.communicate(input.encode() if input else None), timeout
            )
        except TimeoutError:
            _kill_group(process)
            await process.wait()
            raise CommandTimeout(self.host.name, line, timeout or 0.0) from None
        except BaseException:
            _kill_group(process)
            raise
        self.touch()
        code = process.returncode if process.returncode is not None else -1
        return CommandResult(
            code if code >= 0 else 128 - code,
            stdout.decode("utf-8", "replace"),
            stderr.decode("utf-8", "replace"),
            time.monotonic() - started,
        )

    async def start(
        self, command: Command, *, env: Mapping[str, str] | None = None
    ) -> RemoteProcess:
        return LocalProcess(await _spawn(with_env(command, env)))

    async def start_bytes(
        self, command: Command, *, env: Mapping[str, str] | None = None
    ) -> RemoteProcess:
        # Pipes carry bytes anyway: the same process, read through chunks().
        return await self.start(command, env=env)

    async def close(self) -> None:
        return None
