"""A demo host's terminal sessions: what sshd does for ``ssh -t`` (the console's rank
shell, ``!``). The client asked for a PTY, so the shell gets one as its controlling
terminal: job control works, ``tty`` names it, the window size follows the client's.
Without it bash said "no job control in this shell" and ``tty`` "not a tty".

Output and input pass through the PTY's master side; the exit status (or signal) goes
back as for any session (``demo_session.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import struct
import termios
from collections.abc import Callable
from typing import Any

import asyncssh

_CHUNK = 65536


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
