"""An embedded demo cluster: N asyncssh SSH servers in this process, on loopback.

Every demo host has its own loopback address (``127.42.0.1``, ``127.42.0.2``, ...: the
whole of 127/8 is loopback on Linux) and they all listen on ONE port, as a real
cluster's sshds do on port 22, so hosts are told apart by address and ``mpirun -H
127.42.0.1:2,127.42.0.2:2 --mca plm_rsh_args "-p PORT"`` reaches each as its own host.
Each host has its own ed25519 host key, and its own home and work directory under one
folder (what is written there: :mod:`console.transport.demo_files`)::

    <root>/hosts.yaml      the inventory (known_hosts + identity_file set: keys are verified)
    <root>/client_key      the one client key every host accepts
    <root>/known_hosts     ``[127.42.0.x]:PORT ssh-ed25519 ...`` for every host
    <root>/bin/ssh         OpenSSH's ssh reading the calling host's ~/.ssh/config
    <root>/node0/home      HOME and cwd of node0's commands; .ssh/ reaches every peer
    <root>/node0/work      node0's work_dir

Commands run as real local processes (:mod:`console.transport.demo_session`).
``stop_host`` is a host dropping off the network (listener and connections gone; its
processes live on unless asked otherwise); ``stop()`` is powering the whole cluster off,
so it ends every process the demo started.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import getpass
import ipaddress
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import asyncssh

from console.transport.demo_files import inventory_data, write_cluster_files
from console.transport.demo_processes import CLUSTER_ENV, HOST_ENV, end_processes
from console.transport.demo_reaper import start_reaper
from console.transport.demo_session import DemoServer, HomeSFTPServer, Session

# 127.0.0.x is taken by the test suite's sshd hosts; this range is the demo's alone.
FIRST_ADDRESS = ipaddress.IPv4Address("127.42.0.1")
MAX_DEMO_HOSTS = 256
# The shared port is the first host's free port; another demo may hold it on a later
# address (one that stopped its first host), so a few fresh tries are allowed.
PORT_ATTEMPTS = 5
# The caller's environment that a login on the host would plausibly also have.
_PASSED_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "LD_LIBRARY_PATH", "TMPDIR")


def demo_address(index: int) -> str:
    return str(FIRST_ADDRESS + index)


class DemoUnavailable(OSError):
    """The demo cannot listen where it must (e.g. no 127.42.0.x on this system)."""


class DemoNode:
    """One demo host: its key, address, directories, listener and live connections."""

    def __init__(self, cluster: DemoCluster, index: int) -> None:
        self.cluster = cluster
        self.index = index
        self.name = f"node{index}"
        self.address = demo_address(index)
        self.root = cluster.root / self.name
        self.home = self.root / "home"
        self.work_dir = self.root / "work"
        # Each host its own /tmp, as separate machines have: Open MPI keeps its session
        # directory (per node name and uid, the same for every demo host) under TMPDIR.
        self.tmp = self.root / "tmp"
        self.tags = ("demo", "a100" if index % 2 == 0 else "h100")
        self.host_key = asyncssh.generate_private_key("ssh-ed25519", comment=self.name)
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self.connections: set[asyncssh.SSHServerConnection] = set()

    @property
    def port(self) -> int:
        return self.cluster.port

    @property
    def is_up(self) -> bool:
        return self._acceptor is not None

    async def listen(self) -> None:
        if self._acceptor is not None:
            return
        self.home.mkdir(parents=True, exist_ok=True)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir(parents=True, exist_ok=True)
        self._acceptor = await asyncssh.create_server(
            lambda: DemoServer(self),
            self.address,
            self.cluster.port,
            server_host_keys=[self.host_key],
            authorized_client_keys=self.cluster.authorized_keys,
            process_factory=self._serve_session,
            sftp_factory=lambda chan: HomeSFTPServer(chan, self.home),
            encoding=None,
            # A terminal session (ssh -t) gets a real PTY (demo_pty.py), whose line
            # discipline echoes and edits: asyncssh's own editor would do it twice.
            line_editor=False,
            reuse_address=True,
            login_timeout=30,
        )
        if self.cluster.port == 0:
            self.cluster.port = self._acceptor.get_port()

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
        # The demo's ssh first (see demo_files), then the console's interpreter, so
        # python3 / torchrun / mpirun of its environment win.
        path = os.pathsep.join(
            [
                str(self.cluster.bin_dir),
                str(Path(sys.executable).parent),
                os.environ.get("PATH", os.defpath),
            ]
        )
        env = {k: os.environ[k] for k in _PASSED_ENV if k in os.environ}
        peer = process.get_extra_info("peername") or ("", 0)
        env.update(
            HOME=str(self.home),
            PWD=str(self.home),
            USER=user,
            LOGNAME=user,
            SHELL="/bin/bash",
            PATH=path,
            TMPDIR=str(self.tmp),
            SSH_CONNECTION=f"{peer[0]} {peer[1]} {self.address} {self.port}",
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
        await Session(self, process).run(argv)


class DemoCluster:
    """``async with DemoCluster(hosts=4) as cluster:`` then ``cluster.inventory_path``."""

    def __init__(
        self, hosts: int = 4, *, directory: str | Path | None = None, first: int = 0
    ) -> None:
        """``first``: the index of the first host (its name node<first>, its address), so
        that clusters served by several processes together name distinct hosts."""
        if not 1 <= hosts <= MAX_DEMO_HOSTS:
            raise ValueError(f"hosts must be between 1 and {MAX_DEMO_HOSTS}, got {hosts}")
        if not 0 <= first <= MAX_DEMO_HOSTS - hosts:
            raise ValueError(f"first must be between 0 and {MAX_DEMO_HOSTS - hosts}, got {first}")
        self._own_root = directory is None
        self.root = Path(
            tempfile.mkdtemp(prefix="distconsole-demo-") if directory is None else directory
        ).resolve()
        self.token = secrets.token_hex(8)
        self.port = 0  # chosen by the OS when the first host starts, kept across restarts
        self.inventory_path = self.root / "hosts.yaml"
        self.client_key_path = self.root / "client_key"
        self.known_hosts_path = self.root / "known_hosts"
        self.bin_dir = self.root / "bin"
        self.client_key = asyncssh.generate_private_key("ssh-ed25519", comment="distconsole-demo")
        self.authorized_keys = asyncssh.import_authorized_keys(
            self.client_key.export_public_key().decode()
        )
        self.nodes = tuple(DemoNode(self, first + i) for i in range(hosts))
        self._children: set[asyncio.Task[int]] = set()
        self._reaper: subprocess.Popen[bytes] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)

    @property
    def addresses(self) -> frozenset[str]:
        return frozenset(n.address for n in self.nodes)

    def node(self, name: str) -> DemoNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no demo host named {name!r} (hosts: {', '.join(self.names)})")

    async def start(self) -> Path:
        """Start every host and write the key files and inventory; returns its path."""
        self.root.mkdir(parents=True, exist_ok=True)
        for attempt in range(PORT_ATTEMPTS):
            try:
                await self.nodes[0].listen()
                await asyncio.gather(*(n.listen() for n in self.nodes[1:]))
                break
            except OSError as exc:
                await asyncio.gather(*(n.shutdown() for n in self.nodes))
                self.port = 0
                if exc.errno == errno.EADDRNOTAVAIL:
                    raise DemoUnavailable(
                        exc.errno,
                        f"cannot listen on {self.nodes[0].address}: the demo gives every "
                        "host its own loopback address (127.42.0.x), which Linux has "
                        f"without set-up ({exc.strerror})",
                    ) from exc
                if exc.errno != errno.EADDRINUSE or attempt == PORT_ATTEMPTS - 1:
                    raise
        write_cluster_files(self)
        if self._reaper is None:
            self._reaper = start_reaper(self.token, self.root if self._own_root else None)
        return self.inventory_path

    async def stop(self) -> None:
        """Power the cluster off: listeners, connections and every process it started."""
        await asyncio.gather(*(n.shutdown() for n in self.nodes))
        await asyncio.to_thread(end_processes, self.token, None)
        for task in list(self._children):
            task.cancel()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)
        reaper, self._reaper = self._reaper, None
        if reaper is not None and reaper.stdin is not None:
            reaper.stdin.close()  # nothing is left for it: it checks and exits
            await asyncio.to_thread(reaper.wait, 10)

    async def stop_host(self, name: str, *, kill_processes: bool = False) -> None:
        """Take one host off the network (listener closed, its connections dropped)."""
        await self.node(name).shutdown()
        if kill_processes:
            await asyncio.to_thread(end_processes, self.token, name)

    async def start_host(self, name: str) -> None:
        """Bring a stopped host back on the same address and port with the same host key."""
        await self.node(name).listen()

    def adopt(self, proc: asyncio.subprocess.Process) -> None:
        # Holding the Process until it exits keeps asyncio from killing it when its
        # transport is collected; the session may be long gone by then.
        task = asyncio.ensure_future(proc.wait())
        self._children.add(task)
        task.add_done_callback(self._children.discard)

    def inventory_data(self) -> dict[str, Any]:
        return inventory_data(self)

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
