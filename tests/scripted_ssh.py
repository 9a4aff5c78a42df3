"""A SCRIPTED in-process SSH server for fast fault tests (no root, no OpenSSH).

This is a real asyncssh server on a loopback port, with its own ed25519 host key and a
``known_hosts`` file naming it, so the product's client connects, authenticates with a
key and verifies the host key exactly as it does against sshd. What happens to each
``exec`` request is scripted per test, the way asyncssh's own test suite scripts its
server:

- :class:`RunLocally` (the default): run the command with ``bash -c`` on this machine
  (as the demo cluster does), pumping stdin/stdout/stderr and reporting the exit status
  or signal; optional faults: cut the connection after N stdout bytes or lines, insert
  bytes after line N, kill the process group with a signal after line N.
- :class:`Reply`: given stdout/stderr chunks, then an exit status, an exit signal
  (``exit_with_signal``) or a dropped connection.
- :class:`Stream`: stay open writing a line per interval; then exit, drop or hang.

Clients reach it through a small TCP relay on :attr:`~ScriptedSshServer.port` (the
"network"): :meth:`~ScriptedSshServer.freeze` makes the host hang (TCP up, nothing
answers) until :meth:`~ScriptedSshServer.thaw`.

Channels beyond ``max_sessions`` per connection are refused the way OpenSSH's
``MaxSessions`` refuses them (``OPEN_ADMINISTRATIVELY_PROHIBITED``, "open failed").
:meth:`ScriptedSshServer.stop` takes the host off the network (listener closed,
connections aborted with no goodbye), :meth:`~ScriptedSshServer.start` brings it back on
the same port, optionally with a new host key.

Use it through the ``scripted_ssh`` fixture (tests/conftest.py)::

    server = await scripted_ssh()
    server.on("exit 3", Reply(stdout=["out\\n"], exit_status=3))
    host = server.host("node0")
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import re
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import asyncssh

from console.inventory import Host
from console.transport.hello import marker_of, unmarked

ADDRESS = "127.0.0.1"
_CHUNK = 65536

Matcher = str | re.Pattern[str] | Callable[[str], bool] | None


@dataclass
class SessionRecord:
    """What one exec channel asked for and how it ended (for assertions)."""

    command: str
    stdin: bytearray = field(default_factory=bytearray)
    signals: list[str] = field(default_factory=list)
    outcome: str = "open"  # "exit N", "signal NAME", "dropped", "closed by client"


class ScriptedSession:
    """One exec channel as an action sees it: its streams, its record, its connection."""

    def __init__(
        self,
        server: ScriptedSshServer,
        conn: asyncssh.SSHServerConnection,
        stdin: asyncssh.SSHReader[bytes],
        stdout: asyncssh.SSHWriter[bytes],
        stderr: asyncssh.SSHWriter[bytes],
        record: SessionRecord,
    ) -> None:
        self.server = server
        self.conn = conn
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.record = record
        self.channel: Any = stdout.channel

    def exit(self, status: int) -> None:
        self.record.outcome = f"exit {status}"
        self.channel.exit(status)

    def exit_with_signal(self, name: str) -> None:
        self.record.outcome = f"signal {name}"
        self.channel.exit_with_signal(name)

    def drop(self) -> None:
        """The host vanishes: the connection is aborted, no SSH disconnect message."""
        self.record.outcome = "dropped"
        self.conn.abort()

    async def write(self, data: bytes | str, *, err: bool = False) -> None:
        stream = self.stderr if err else self.stdout
        stream.write(data.encode() if isinstance(data, str) else data)
        await stream.drain()

    async def read_stdin(
        self,
        on_signal: Callable[[str], None] | None = None,
        on_data: Callable[[bytes], Awaitable[None]] | None = None,
        on_eof: Callable[[], None] | None = None,
    ) -> None:
        """Read stdin into the record (and ``on_data``) until EOF (``on_eof``), then keep
        listening for channel signals (``on_signal``: the console kills a command after
        closing its stdin) until cancelled or the channel goes."""
        eof = False
        while True:
            try:
                data = await self.stdin.read(_CHUNK)
            except asyncssh.SignalReceived as exc:
                self.record.signals.append(exc.signal)
                if on_signal is not None:
                    on_signal(exc.signal)
                continue
            except (asyncssh.BreakReceived, asyncssh.TerminalSizeChanged):
                continue
            except (asyncssh.Error, OSError):
                return
            if data:
                self.record.stdin += data
                if on_data is not None:
                    await on_data(data)
                continue
            if not eof:
                eof = True
                if on_eof is not None:
                    on_eof()
            # asyncssh's reader returns b"" at once after EOF but still raises a signal
            # that arrives later: poll for one.
            await asyncio.sleep(0.02)

    async def sweep_signals(self) -> None:
        """Record signals still queued on stdin (a kill sent right before the close)."""
        with contextlib.suppress(asyncssh.Error, OSError, TimeoutError):
            while True:
                try:
                    if not await asyncio.wait_for(self.stdin.read(_CHUNK), 0.1):
                        return
                except asyncssh.SignalReceived as exc:
                    self.record.signals.append(exc.signal)
                except (asyncssh.BreakReceived, asyncssh.TerminalSizeChanged):
                    continue


class Action(Protocol):
    async def serve(self, session: ScriptedSession) -> None: ...


@dataclass
class Reply:
    """Write these chunks (stdout, then stderr), then exit with ``exit_status``, or die
    of ``signal`` (e.g. ``"KILL"``), or drop the connection (``drop=True``)."""

    stdout: Sequence[bytes | str] = ()
    stderr: Sequence[bytes | str] = ()
    exit_status: int = 0
    signal: str | None = None
    drop: bool = False
    delay: float = 0.0  # before answering

    async def serve(self, session: ScriptedSession) -> None:
        reader = asyncio.create_task(session.read_stdin())
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            for chunk in self.stdout:
                await session.write(chunk)
            for chunk in self.stderr:
                await session.write(chunk, err=True)
            if self.drop:
                session.drop()
            elif self.signal is not None:
                session.exit_with_signal(self.signal)
            else:
                session.exit(self.exit_status)
        finally:
            reader.cancel()


@dataclass
class Stream:
    """Write ``line(i)`` every ``interval`` seconds; after ``count`` lines (None: never)
    ``then`` exit 0, drop the connection, or hang. A channel signal (the client's kill)
    ends it with that signal, as a real process would."""

    line: Callable[[int], str] = lambda i: f"line {i}"
    interval: float = 0.05
    count: int | None = None
    then: Literal["exit", "drop", "hang"] = "exit"

    async def serve(self, session: ScriptedSession) -> None:
        killed: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def on_signal(name: str) -> None:
            if not killed.done():
                killed.set_result(name)

        reader = asyncio.create_task(session.read_stdin(on_signal))
        try:
            i = 0
            while self.count is None or i < self.count:
                if killed.done():
                    session.exit_with_signal(killed.result())
                    return
                await session.write(self.line(i) + "\n")
                i += 1
                await asyncio.wait({killed}, timeout=self.interval)
            if self.then == "exit":
                session.exit(0)
            elif self.then == "drop":
                session.drop()
            else:
                closed = asyncio.ensure_future(session.channel.wait_closed())
                await asyncio.wait({killed, closed}, return_when=asyncio.FIRST_COMPLETED)
                closed.cancel()
                if killed.done():
                    session.exit_with_signal(killed.result())
        finally:
            reader.cancel()


@dataclass
class RunLocally:
    """Run the command with ``bash -c`` here (cwd and HOME: the server's home), with
    optional faults on its stdout:

    - ``drop_after_bytes`` / ``drop_after_lines`` (+ ``drop_extra_bytes`` of the next
      line): forward exactly that much stdout, then abort the connection (mid-line or
      mid-frame when the count falls there);
    - ``insert_after_lines``: ``{n: data}`` writes ``data`` right after stdout line n;
    - ``signal_after_lines``: ``(n, "KILL")`` kills the process group after line n
      (the exit is then reported as that signal, like sshd does).

    When the session ends any way, the process group is killed (no leftovers)."""

    drop_after_bytes: int | None = None
    drop_after_lines: int | None = None
    drop_extra_bytes: int = 0  # with drop_after_lines: this much of the next line too
    insert_after_lines: Mapping[int, bytes] = field(default_factory=dict)
    signal_after_lines: tuple[int, str] | None = None

    async def serve(self, session: ScriptedSession) -> None:
        server = session.server
        try:
            proc = await asyncio.create_subprocess_exec(
                "bash",
                "-c",
                session.record.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=server.home,
                env=server.session_env(),
                start_new_session=True,  # sshd makes every session a session leader
            )
        except OSError as exc:
            await session.write(f"bash: {exc}\n", err=True)
            session.exit(127)
            return
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        pid = proc.pid
        feed = asyncio.create_task(self._feed(session, proc.stdin, pid))
        out = asyncio.create_task(self._pump_stdout(session, proc.stdout, pid))
        err = asyncio.create_task(_pump(proc.stderr, session.stderr))
        pumps = asyncio.gather(out, err)
        closed = asyncio.ensure_future(session.channel.wait_closed())
        try:
            await asyncio.wait({pumps, closed}, return_when=asyncio.FIRST_COMPLETED)
            if pumps.done() and not pumps.exception() and not out.result():
                exited = asyncio.ensure_future(proc.wait())
                await asyncio.wait({exited, closed}, return_when=asyncio.FIRST_COMPLETED)
                if exited.done():
                    status = exited.result()
                    if status < 0:
                        session.exit_with_signal(signal.Signals(-status).name.removeprefix("SIG"))
                    else:
                        session.exit(status)
                else:
                    exited.cancel()
            elif closed.done() and session.record.outcome == "open":
                session.record.outcome = "closed by client"
        finally:
            _kill_group(pid, signal.SIGKILL)
            for task in (feed, pumps, closed):
                task.cancel()
            await asyncio.gather(feed, pumps, closed, return_exceptions=True)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    async def _feed(self, session: ScriptedSession, stdin: asyncio.StreamWriter, pid: int) -> None:
        closed = False

        def forward_signal(name: str) -> None:
            _kill_group(pid, getattr(signal, f"SIG{name}", signal.SIGTERM))

        async def forward_data(data: bytes) -> None:
            nonlocal closed
            if closed:
                return  # the process closed its stdin: drop further input, like sshd
            try:
                stdin.write(data)
                await stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                closed = True

        def close_stdin() -> None:
            with contextlib.suppress(OSError):
                stdin.close()

        try:
            await session.read_stdin(forward_signal, forward_data, close_stdin)
        finally:
            close_stdin()

    async def _pump_stdout(
        self, session: ScriptedSession, source: asyncio.StreamReader, pid: int
    ) -> bool:
        """Forward stdout with the faults applied; True when the connection was dropped."""
        sent_bytes = 0
        lines = 0
        drop_at = self.drop_after_bytes  # stdout bytes after which the connection goes
        while data := await source.read(_CHUNK):
            while data:
                piece = data
                # Stop at the next byte budget or line boundary that triggers a fault.
                if drop_at is not None:
                    piece = piece[: drop_at - sent_bytes]
                newline = piece.find(b"\n")
                if newline >= 0:
                    piece = piece[: newline + 1]
                data = data[len(piece) :]
                await session.write(piece)
                sent_bytes += len(piece)
                if piece.endswith(b"\n"):
                    lines += 1
                    extra = self.insert_after_lines.get(lines)
                    if extra is not None:
                        await session.write(extra)
                    if self.signal_after_lines and lines == self.signal_after_lines[0]:
                        name = self.signal_after_lines[1]
                        _kill_group(pid, getattr(signal, f"SIG{name}"))
                    if lines == self.drop_after_lines:
                        cut = sent_bytes + self.drop_extra_bytes
                        drop_at = cut if drop_at is None else min(drop_at, cut)
                if sent_bytes == drop_at:
                    session.drop()
                    _kill_group(pid, signal.SIGKILL)  # its output has nowhere to go now
                    return True
        return False


async def _pump(source: asyncio.StreamReader, channel: asyncssh.SSHWriter[bytes]) -> None:
    with contextlib.suppress(asyncssh.Error, OSError):
        while data := await source.read(_CHUNK):
            channel.write(data)
            await channel.drain()


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


@dataclass
class _Rule:
    match: Matcher
    action: Action
    times: int | None  # how many sessions it may still serve; None: every one

    def matches(self, command: str) -> bool:
        if self.times == 0:
            return False
        if self.match is None:
            return True
        if isinstance(self.match, str):
            return self.match in command
        if isinstance(self.match, re.Pattern):
            return self.match.search(command) is not None
        return self.match(command)


class _ServerConnection(asyncssh.SSHServer):
    def __init__(self, server: ScriptedSshServer) -> None:
        self.server = server
        self.conn: asyncssh.SSHServerConnection | None = None
        self.open_sessions = 0

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        self.server.connections.add(conn)
        self.server.connects += 1

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self.server.connections.discard(self.conn)

    def session_requested(self) -> Any:
        limit = self.server.max_sessions
        if limit is not None and self.open_sessions >= limit:
            self.server.refused += 1
            # What OpenSSH answers past MaxSessions.
            raise asyncssh.ChannelOpenError(
                asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, "open failed"
            )
        self.open_sessions += 1
        return self._handle

    async def _handle(
        self,
        stdin: asyncssh.SSHReader[bytes],
        stdout: asyncssh.SSHWriter[bytes],
        stderr: asyncssh.SSHWriter[bytes],
    ) -> None:
        assert self.conn is not None
        command = stdout.channel.get_command() or ""
        # The client marks where its output starts (transport/hello.py): the login shell
        # prints the marker first. Here it is written before any action serves, and the
        # rules, the record and RunLocally's bash see the command that follows it.
        marker = marker_of(command)
        command = unmarked(command)
        record = SessionRecord(command)
        self.server.sessions.append(record)
        session = ScriptedSession(self.server, self.conn, stdin, stdout, stderr, record)
        task = asyncio.current_task()
        assert task is not None
        self.server.handlers.add(task)
        try:
            action = self.server.action_for(command)
            if marker is not None:
                stdout.write(marker.encode() + b"\n")
            await action.serve(session)
        except (asyncssh.Error, OSError):
            # The client closed the channel or the connection went while we wrote.
            if record.outcome == "open":
                record.outcome = "closed by client"
        except Exception as exc:
            # asyncssh would turn this into a dropped connection; keep it for the test.
            record.outcome = f"error {exc!r}"
            self.server.errors.append(exc)
        finally:
            await session.sweep_signals()
            self.open_sessions -= 1
            self.server.handlers.discard(task)


class ScriptedSshServer:
    """One scripted SSH host on ``127.0.0.1`` (see the module doc)."""

    def __init__(self, root: Path, *, name: str = "scripted") -> None:
        self.name = name
        self.root = root
        self.home = root / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.client_key_path = root / "client_key"
        self.known_hosts_path = root / "known_hosts"
        self.client_key = asyncssh.generate_private_key("ssh-ed25519", comment="scripted-client")
        self.client_key.write_private_key(str(self.client_key_path))
        self.client_key_path.chmod(0o600)
        self.host_key = asyncssh.generate_private_key("ssh-ed25519", comment=name)
        self.port = 0  # chosen by the OS on the first start, kept across restarts
        self.max_sessions: int | None = 10  # OpenSSH's default MaxSessions
        self.rules: list[_Rule] = []
        self.default: Action = RunLocally()
        self.sessions: list[SessionRecord] = []
        self.connections: set[asyncssh.SSHServerConnection] = set()
        self.connects = 0  # SSH connections accepted, over every start
        self.refused = 0  # channels refused past max_sessions
        self.handlers: set[asyncio.Task[Any]] = set()  # sessions being served
        self.errors: list[Exception] = []  # scripting bugs raised while serving
        self._acceptor: asyncssh.SSHAcceptor | None = None
        # Clients reach the SSH server through a relay on ``port`` (the "network"), so a
        # test can freeze the link (a hung host: TCP up, nothing answers).
        self._relay: asyncio.Server | None = None
        self._links: set[asyncio.Task[None]] = set()
        self._thawed = asyncio.Event()
        self._thawed.set()

    # -- script ----------------------------------------------------------------------

    def on(self, match: Matcher, action: Action, *, times: int | None = None) -> None:
        """Serve commands matching ``match`` (substring, regex, predicate, None: any)
        with ``action``; ``times`` limits how many sessions the rule serves. Rules are
        tried in the order given; unmatched commands get :attr:`default`."""
        self.rules.append(_Rule(match, action, times))

    def action_for(self, command: str) -> Action:
        for rule in self.rules:
            if rule.matches(command):
                if rule.times is not None:
                    rule.times -= 1
                return rule.action
        return self.default

    def session_env(self) -> dict[str, str]:
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        env = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TMPDIR")}
        user = getpass.getuser()
        env.update(HOME=str(self.home), USER=user, LOGNAME=user, SHELL="/bin/bash", PATH=path)
        return env

    # -- network ---------------------------------------------------------------------

    @property
    def is_up(self) -> bool:
        return self._acceptor is not None

    async def start(self, *, new_host_key: bool = False) -> None:
        """Listen (again, on the same port); ``new_host_key``: as after a reinstall.
        ``known_hosts_path`` keeps naming the key the server had on its first start."""
        if self._acceptor is not None:
            return
        if new_host_key:
            self.host_key = asyncssh.generate_private_key("ssh-ed25519", comment=self.name)
        authorized = asyncssh.import_authorized_keys(self.client_key.export_public_key().decode())
        self._acceptor = await asyncssh.create_server(
            lambda: _ServerConnection(self),
            ADDRESS,
            0,
            server_host_keys=[self.host_key],
            authorized_client_keys=authorized,
            encoding=None,
            login_timeout=10,
        )
        self._relay = await asyncio.start_server(
            self._relay_link, ADDRESS, self.port, reuse_address=True
        )
        first = self.port == 0
        self.port = self._relay.sockets[0].getsockname()[1]
        if first:
            self.known_hosts_path.write_text(self.known_hosts_line())

    def freeze(self) -> None:
        """The host hangs: connections stay open, nothing is forwarded either way (new
        TCP connections are accepted and then hear nothing)."""
        self._thawed.clear()

    def thaw(self) -> None:
        self._thawed.set()

    async def _relay_link(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None and self._acceptor is not None
        self._links.add(task)
        try:
            server_r, server_w = await asyncio.open_connection(ADDRESS, self._acceptor.get_port())
        except OSError:
            client_w.close()
            self._links.discard(task)
            return
        try:
            copies = [
                asyncio.ensure_future(self._copy(client_r, server_w)),
                asyncio.ensure_future(self._copy(server_r, client_w)),
            ]
            # SSH never half-closes: one side gone ends the link.
            await asyncio.wait(copies, return_when=asyncio.FIRST_COMPLETED)
            for copy in copies:
                copy.cancel()
            await asyncio.gather(*copies, return_exceptions=True)
        finally:
            for writer in (client_w, server_w):
                writer.close()
            self._links.discard(task)

    async def _copy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(_CHUNK):
                await self._thawed.wait()
                writer.write(data)
                await writer.drain()

    def known_hosts_line(self, key: asyncssh.SSHKey | None = None) -> str:
        public = (key or self.host_key).export_public_key().decode().strip()
        return f"[{ADDRESS}]:{self.port} {public}\n"

    async def stop(self) -> None:
        """The host drops off the network: listener closed, connections aborted."""
        acceptor, self._acceptor = self._acceptor, None
        relay, self._relay = self._relay, None
        if relay is not None:
            relay.close()
        self.drop_connections()
        for link in list(self._links):
            link.cancel()
        if self._links:
            await asyncio.wait(set(self._links), timeout=5)
        if acceptor is not None:
            acceptor.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(acceptor.wait_closed(), 5)
        if relay is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(relay.wait_closed(), 5)

    async def close(self) -> None:
        """Stop, and wait for every session's handler (and its local process) to end."""
        await self.stop()
        # Aborted connections end the sessions (their processes killed and reaped);
        # cancel only what is still running after that.
        if self.handlers:
            await asyncio.wait(set(self.handlers), timeout=2)
        for task in list(self.handlers):
            task.cancel()
        if self.handlers:
            await asyncio.wait(set(self.handlers), timeout=5)

    def drop_connections(self) -> None:
        for conn in list(self.connections):
            conn.abort()
        self.connections.clear()

    # -- client side -----------------------------------------------------------------

    def host(self, name: str | None = None, **overrides: Any) -> Host:
        """An inventory host for this server: key auth, host key verified against
        :attr:`known_hosts_path`, the local interpreter as ``python``, simulated GPUs."""
        fields: dict[str, Any] = {
            "name": name or self.name,
            "address": ADDRESS,
            "port": self.port,
            "user": getpass.getuser(),
            "identity_file": str(self.client_key_path),
            "known_hosts": str(self.known_hosts_path),
            "connect_timeout": 3.0,
            "python": sys.executable,
            "gpus": 2,
            "gpu_source": "simulated",
            "work_dir": str(self.home / "work"),
        }
        fields.update(overrides)
        return Host(**fields)
