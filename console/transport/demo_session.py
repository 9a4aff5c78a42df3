"""One demo host's SSH side: a channel bridged to a local bash, connection tracking, SFTP.

A command is a real local process, ``bash -c CMD``, in its own session (as sshd does),
with stdin/stdout/stderr pumped to the SSH channel and the exit status (or signal)
reported back. As with a real sshd, a dropped connection only closes the pipes: a process
that detached with ``setsid`` keeps running. A session whose client asked for a terminal
(``ssh -t``) runs on a PTY instead (:func:`run_in_pty`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import struct
import termios
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncssh

from console.transport.demo_shapes import DemoHostShape as DemoNode

_CHUNK = 65536


class Session:
    """One exec/shell channel bridged to one local bash process."""

    def __init__(self, node: DemoNode, process: asyncssh.SSHServerProcess[bytes]) -> None:
        self.node = node
        self.process = process

    async def run(self, argv: list[str]) -> None:
        if self.process.get_terminal_type() is not None:  # ssh -t: a terminal session
            status = await run_in_pty(
                self.process,
                argv,
                cwd=self.node.home,
                env=self.node.session_env(self.process),
                adopt=self.node.cluster.adopt,
                signal_group=_signal_group,
            )
            if status is not None:
                _report_exit(self.process, status)
            return
        loop = asyncio.get_running_loop()
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=in_r,
                stdout=out_w,
                stderr=err_w,
                cwd=self.node.home,
                env=self.node.session_env(self.process),
                start_new_session=True,  # sshd makes every session a session leader
            )
        except OSError as exc:
            for fd in (in_r, in_w, out_r, out_w, err_r, err_w):
                os.close(fd)
            self.process.stderr.write(f"{argv[0]}: {exc}\n".encode())
            self.process.exit(127)
            return
        finally:
            for fd in (in_r, out_w, err_w):
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.node.cluster.adopt(proc)
        self._deliver_signals_at_once(proc.pid)
        stdin_t, stdin_p = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(in_w, "wb", 0)
        )
        stdin = asyncio.StreamWriter(stdin_t, stdin_p, None, loop)
        out_reader, out_t = await _pipe_reader(out_r)
        err_reader, err_t = await _pipe_reader(err_r)

        feed = asyncio.create_task(self._feed_stdin(stdin, proc.pid))
        pumps: asyncio.Future[Any] = asyncio.gather(
            _pump(out_reader, self.process.stdout), _pump(err_reader, self.process.stderr)
        )
        closed: asyncio.Future[Any] = asyncio.ensure_future(self.process.wait_closed())
        try:
            # OpenSSH closes the channel once the output pipes hit EOF (even a background
            # child holding stdout keeps it open), or earlier when the client goes away.
            await asyncio.wait({pumps, closed}, return_when=asyncio.FIRST_COMPLETED)
            if pumps.done() and pumps.exception() is None:
                exited: asyncio.Future[Any] = asyncio.ensure_future(proc.wait())
                await asyncio.wait({exited, closed}, return_when=asyncio.FIRST_COMPLETED)
                if exited.done():
                    _report_exit(self.process, exited.result())
                else:
                    exited.cancel()
        finally:
            for task in (feed, pumps, closed):
                task.cancel()
            await asyncio.gather(feed, pumps, closed, return_exceptions=True)
            # Closing our pipe ends is all a dropped session does to the process.
            for transport in (stdin_t, out_t, err_t):
                transport.close()

    def _deliver_signals_at_once(self, pid: int) -> None:
        # asyncssh queues a channel signal behind stdin's data (the next read raises it),
        # so one sent after stdin's EOF (run() closes stdin, then a timeout sends KILL)
        # would never be read. sshd delivers it on arrival: so does this, through the
        # session's own signal_received callback. Signals queued before this point are
        # still read from stdin by _feed_stdin.
        def received(name: str) -> None:
            _signal_group(pid, getattr(signal, f"SIG{name}", None))

        self.process.signal_received = received  # type: ignore[method-assign,assignment]

    async def _feed_stdin(self, stdin: asyncio.StreamWriter, pid: int) -> None:
        while True:
            try:
                data = await self.process.stdin.read(_CHUNK)
            except asyncssh.SignalReceived as exc:
                _signal_group(pid, getattr(signal, f"SIG{exc.signal}", None))
                continue
            except asyncssh.BreakReceived:
                _signal_group(pid, signal.SIGINT)
                continue
            except asyncssh.TerminalSizeChanged:
                continue
            except (asyncssh.Error, OSError):
                break
            if not data:
                break
            try:
                stdin.write(data)
                await stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                return  # the process closed its stdin; drop further input like sshd does
        with contextlib.suppress(OSError):
            stdin.close()


# -- terminal sessions ------------------------------------------------------------------
# What sshd does for ``ssh -t`` (the console's rank shell, ``!``): the client asked for a
# PTY, so the shell gets one as its controlling terminal: job control works, ``tty``
# names it, the window size follows the client's. Without it bash said "no job control
# in this shell" and ``tty`` "not a tty". Output and input pass through the master side.


def set_window(fd: int, columns: int, rows: int) -> None:
    if columns > 0 and rows > 0:
        with contextlib.suppress(OSError):
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


def _take_terminal() -> None:
    # In the child, after setsid (start_new_session): stdin, the PTY's slave side,
    # becomes the session's controlling terminal, as sshd's login does.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


async def run_in_pty(
    process: asyncssh.SSHServerProcess[bytes],
    argv: list[str],
    *,
    cwd: str | os.PathLike[str],
    env: dict[str, str],
    adopt: Callable[[asyncio.subprocess.Process], None],
    signal_group: Callable[[int, signal.Signals | None], None],
) -> int | None:
    """Run ``argv`` on a new PTY bridged to the channel; its exit status (None: the
    client went away first)."""
    master, slave = os.openpty()
    columns, rows, *_ = process.get_terminal_size()
    set_window(master, columns, rows)
    env = {**env, "TERM": process.get_terminal_type() or "xterm"}
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env=env,
            start_new_session=True,
            preexec_fn=_take_terminal,
        )
    except OSError as exc:
        os.close(master)
        process.stderr.write(f"{argv[0]}: {exc}\n".encode())
        return 127
    finally:
        os.close(slave)
    adopt(proc)
    loop = asyncio.get_running_loop()
    os.set_blocking(master, False)
    drained: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        try:
            data = os.read(master, _CHUNK)
        except BlockingIOError:
            return
        except OSError:  # EIO: every holder of the slave side has closed it
            data = b""
        if data:
            process.stdout.write(data)
        else:
            loop.remove_reader(master)
            if not drained.done():
                drained.set_result(None)

    loop.add_reader(master, readable)
    feed = asyncio.create_task(_feed(process, master, proc.pid, signal_group))
    closed: asyncio.Future[Any] = asyncio.ensure_future(process.wait_closed())
    try:
        await asyncio.wait({drained, closed}, return_when=asyncio.FIRST_COMPLETED)
        if closed.done():
            return None
        exited = asyncio.ensure_future(proc.wait())
        await asyncio.wait({exited, closed}, return_when=asyncio.FIRST_COMPLETED)
        if not exited.done():
            exited.cancel()
            return None
        return exited.result()
    finally:
        loop.remove_reader(master)
        for task in (feed, closed):
            task.cancel()
        await asyncio.gather(feed, closed, return_exceptions=True)
        os.close(master)


async def _feed(
    process: asyncssh.SSHServerProcess[bytes],
    master: int,
    pid: int,
    signal_group: Callable[[int, signal.Signals | None], None],
) -> None:
    while True:
        try:
            data = await process.stdin.read(_CHUNK)
        except asyncssh.TerminalSizeChanged as exc:
            set_window(master, exc.width, exc.height)
            continue
        except asyncssh.SignalReceived as exc:
            signal_group(pid, getattr(signal, f"SIG{exc.signal}", None))
            continue
        except asyncssh.BreakReceived:
            signal_group(pid, signal.SIGINT)
            continue
        except (asyncssh.Error, OSError):
            return
        if not data:
            return  # the client's EOF: the terminal stays, as with sshd
        while data:
            try:
                written = os.write(master, data)
            except BlockingIOError:
                await asyncio.sleep(0.01)
                continue
            except OSError:
                return
            data = data[written:]


async def _pipe_reader(fd: int) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_CHUNK * 4)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", 0)
    )
    return reader, transport


async def _pump(source: asyncio.StreamReader, channel: asyncssh.SSHWriter[bytes]) -> None:
    while data := await source.read(_CHUNK):
        channel.write(data)
        await channel.drain()


def _report_exit(process: asyncssh.SSHServerProcess[bytes], status: int) -> None:
    if status >= 0:
        process.exit(status)
        return
    try:
        name = signal.Signals(-status).name.removeprefix("SIG")
    except ValueError:
        process.exit(128 - status)
        return
    process.exit_with_signal(name)


def _signal_group(pid: int, sig: signal.Signals | None) -> None:
    # sshd delivers a channel signal to the session's process group (killpg).
    if sig is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


class DemoServer(asyncssh.SSHServer):
    """Keeps track of a host's connections so stop_host can drop them."""

    def __init__(self, node: DemoNode) -> None:
        self.node = node
        self.conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        self.node.connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self.node.connections.discard(self.conn)

    def connection_requested(
        self, dest_host: str, dest_port: int, orig_host: str, orig_port: int
    ) -> bool:
        # Lets a demo host act as a ProxyJump hop to the other demo hosts, and forward
        # to its own loopback (`distconsole forward`; the demo hosts share this
        # machine's), as sshd allows by default; nowhere else.
        return dest_host in self.node.cluster.addresses or dest_host in LOOPBACK_NAMES


class HomeSFTPServer(asyncssh.SFTPServer):
    """SFTP with relative paths starting in the host's home, like OpenSSH's sftp-server."""

    def __init__(self, chan: asyncssh.SSHServerChannel[Any], home: Path) -> None:
        super().__init__(chan)
        self._home = os.fsencode(home)

    def map_path(self, path: bytes) -> bytes:
        return path if path.startswith(b"/") else os.path.join(self._home, path)
