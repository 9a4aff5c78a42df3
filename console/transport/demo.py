"""An embedded demo cluster: N asyncssh SSH servers in this process, on loopback.

Every demo host listens on ``127.0.0.1`` with a port of its own (hosts are told apart by
port, so no extra loopback addresses are needed), has its own ed25519 host key, and its
own home and work directory under one folder::

    <root>/hosts.yaml      the inventory (known_hosts + identity_file set: keys are verified)
    <root>/client_key      the one client key every host accepts
    <root>/known_hosts     ``[127.0.0.1]:PORT ssh-ed25519 ...`` for every host
    <root>/node0/home      HOME and cwd of node0's commands
    <root>/node0/work      node0's work_dir

A command is a real local process, ``bash -c CMD``, in its own session (as sshd does),
with stdin/stdout/stderr pumped to the SSH channel and the exit status (or signal)
reported back. As with a real sshd, a dropped connection only closes the pipes: a process
that detached with ``setsid`` keeps running. ``stop_host`` is a host dropping off the
network (listener and connections gone; its processes live on unless asked otherwise);
``stop()`` is powering the whole cluster off, so it ends every process the demo started.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import secrets
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import asyncssh
from ruamel.yaml import YAML

from console.transport.demo_processes import CLUSTER_ENV, HOST_ENV, end_processes

DEMO_ADDRESS = "127.0.0.1"
DEMO_GPUS = 4
MAX_DEMO_HOSTS = 256
# The caller's environment that a login on the host would plausibly also have.
_PASSED_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "LD_LIBRARY_PATH", "TMPDIR")
_CHUNK = 65536


class DemoNode:
    """One demo host: its key, directories, listener and live connections."""

    def __init__(self, cluster: DemoCluster, index: int) -> None:
        self.cluster = cluster
        self.index = index
        self.name = f"node{index}"
        self.root = cluster.root / self.name
        self.home = self.root / "home"
        self.work_dir = self.root / "work"
        self.tags = ("demo", "a100" if index % 2 == 0 else "h100")
        self.host_key = asyncssh.generate_private_key("ssh-ed25519", comment=self.name)
        self.port = 0  # chosen by the OS on the first start, kept across restarts
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self.connections: set[asyncssh.SSHServerConnection] = set()

    @property
    def is_up(self) -> bool:
        return self._acceptor is not None

    async def listen(self) -> None:
        if self._acceptor is not None:
            return
        self.home.mkdir(parents=True, exist_ok=True)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._acceptor = await asyncssh.create_server(
            lambda: _DemoServer(self),
            DEMO_ADDRESS,
            self.port,
            server_host_keys=[self.host_key],
            authorized_client_keys=self.cluster.authorized_keys,
            process_factory=self._serve_session,
            sftp_factory=lambda chan: _HomeSFTPServer(chan, self.home),
            encoding=None,
            reuse_address=True,
            login_timeout=30,
        )
        self.port = self._acceptor.get_port()

    async def shutdown(self) -> None:
        acceptor, self._acceptor = self._acceptor, None
        for conn in list(self.connections):
            conn.abort()  # a vanished host: no goodbye on the wire
        self.connections.clear()
        if acceptor is not None:
            acceptor.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(acceptor.wait_closed(), 5)

    def session_env(self, process: asyncssh.SSHServerProcess[bytes]) -> dict[str, str]:
        user = getpass.getuser()
        # Put the console's interpreter first so python3 / torchrun / mpirun of its env win.
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        env = {k: os.environ[k] for k in _PASSED_ENV if k in os.environ}
        peer = process.get_extra_info("peername") or ("", 0)
        env.update(
            HOME=str(self.home),
            PWD=str(self.home),
            USER=user,
            LOGNAME=user,
            SHELL="/bin/bash",
            PATH=path,
            SSH_CONNECTION=f"{peer[0]} {peer[1]} {DEMO_ADDRESS} {self.port}",
        )
        # Like sshd with `AcceptEnv *`: variables the client sends are honoured.
        env.update({str(k): str(v) for k, v in process.env.items()})
        env[HOST_ENV] = self.name
        env[CLUSTER_ENV] = self.cluster.token
        return env

    async def _serve_session(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        if process.subsystem is not None:
            process.stderr.write(f"subsystem {process.subsystem!r} not supported\n".encode())
            process.exit(127)
            return
        argv = ["bash", "-c", process.command] if process.command is not None else ["bash"]
        await _Session(self, process).run(argv)


class _Session:
    """One exec/shell channel bridged to one local bash process."""

    def __init__(self, node: DemoNode, process: asyncssh.SSHServerProcess[bytes]) -> None:
        self.node = node
        self.process = process

    async def run(self, argv: list[str]) -> None:
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


class _DemoServer(asyncssh.SSHServer):
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
        # Lets a demo host act as a ProxyJump hop to the other (loopback) demo hosts.
        return dest_host in (DEMO_ADDRESS, "localhost")


class _HomeSFTPServer(asyncssh.SFTPServer):
    """SFTP with relative paths starting in the host's home, like OpenSSH's sftp-server."""

    def __init__(self, chan: asyncssh.SSHServerChannel[Any], home: Path) -> None:
        super().__init__(chan)
        self._home = os.fsencode(home)

    def map_path(self, path: bytes) -> bytes:
        return path if path.startswith(b"/") else os.path.join(self._home, path)


class DemoCluster:
    """``async with DemoCluster(hosts=4) as cluster:`` then ``cluster.inventory_path``."""

    def __init__(self, hosts: int = 4, *, directory: str | Path | None = None) -> None:
        if not 1 <= hosts <= MAX_DEMO_HOSTS:
            raise ValueError(f"hosts must be between 1 and {MAX_DEMO_HOSTS}, got {hosts}")
        self._own_root = directory is None
        self.root = Path(
            tempfile.mkdtemp(prefix="distconsole-demo-") if directory is None else directory
        ).resolve()
        self.token = secrets.token_hex(8)
        self.inventory_path = self.root / "hosts.yaml"
        self.client_key_path = self.root / "client_key"
        self.known_hosts_path = self.root / "known_hosts"
        self.client_key = asyncssh.generate_private_key("ssh-ed25519", comment="distconsole-demo")
        self.authorized_keys = asyncssh.import_authorized_keys(
            self.client_key.export_public_key().decode()
        )
        self.nodes = tuple(DemoNode(self, i) for i in range(hosts))
        self._children: set[asyncio.Task[int]] = set()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)

    def node(self, name: str) -> DemoNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no demo host named {name!r} (hosts: {', '.join(self.names)})")

    async def start(self) -> Path:
        """Start every host and write the key files and inventory; returns its path."""
        self.root.mkdir(parents=True, exist_ok=True)
        await asyncio.gather(*(n.listen() for n in self.nodes))
        self._write_files()
        return self.inventory_path

    async def stop(self) -> None:
        """Power the cluster off: listeners, connections and every process it started."""
        await asyncio.gather(*(n.shutdown() for n in self.nodes))
        await asyncio.to_thread(end_processes, self.token, None)
        for task in list(self._children):
            task.cancel()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    async def stop_host(self, name: str, *, kill_processes: bool = False) -> None:
        """Take one host off the network (listener closed, its connections dropped)."""
        await self.node(name).shutdown()
        if kill_processes:
            await asyncio.to_thread(end_processes, self.token, name)

    async def start_host(self, name: str) -> None:
        """Bring a stopped host back on the same port with the same host key."""
        await self.node(name).listen()

    def adopt(self, proc: asyncio.subprocess.Process) -> None:
        # Holding the Process until it exits keeps asyncio from killing it when its
        # transport is collected; the session may be long gone by then.
        task = asyncio.ensure_future(proc.wait())
        self._children.add(task)
        task.add_done_callback(self._children.discard)

    async def __aenter__(self) -> DemoCluster:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def inventory_data(self) -> dict[str, Any]:
        return {
            "defaults": {
                "user": getpass.getuser(),
                "identity_file": str(self.client_key_path),
                "known_hosts": str(self.known_hosts_path),
                "connect_timeout": 5,
                "python": sys.executable,
                "gpus": DEMO_GPUS,
                "gpu_source": "simulated",
            },
            "hosts": [
                {
                    "name": n.name,
                    "address": DEMO_ADDRESS,
                    "port": n.port,
                    "work_dir": str(n.work_dir),
                    "tags": list(n.tags),
                }
                for n in self.nodes
            ],
        }

    def _write_files(self) -> None:
        self.client_key.write_private_key(str(self.client_key_path))
        self.client_key_path.chmod(0o600)  # OpenSSH's ssh refuses readable keys
        lines = [
            f"[{DEMO_ADDRESS}]:{n.port} {n.host_key.export_public_key().decode().strip()}\n"
            for n in self.nodes
        ]
        self.known_hosts_path.write_text("".join(lines))
        yaml = YAML(typ="safe", pure=True)
        yaml.default_flow_style = False
        with self.inventory_path.open("w") as out:
            out.write(
                f"# distconsole demo cluster: {len(self.nodes)} in-process SSH servers on "
                f"{DEMO_ADDRESS}. GPUs are simulated (no GPU here).\n"
            )
            yaml.dump(self.inventory_data(), out)
