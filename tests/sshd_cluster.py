"""A cluster of real OpenSSH sshd processes on loopback, for integration tests.

Each host is its own ``/usr/sbin/sshd -D -e`` on ``127.0.0.(10+i)`` with a free port,
its own ed25519 host key and its own non-root user (``dctest0..dctest15``, plain bash,
no slow rc files). One client key pair is authorised for every user, a known_hosts file
lists every host key, and every user's ``~/.ssh/config`` lets it reach every other host
without prompts (MPI launchers ssh from node0 to node1).

Users are claimed with an ``flock`` per user so that concurrent pytest runs on the same
machine never share (or ``pkill``) each other's users.

``SshdCluster(root, n, shared_account=True)`` models a real MPI cluster instead: every
host's sshd accepts ONE test user (one home on this filesystem stands for an NFS home
shared by every node) and all sshds listen on the SAME port number, each on its own
127.0.0.x address with its own host key. What differs is :meth:`SshdCluster.stop`: with
one account, "every process of the host's user" would be every host's processes, so
stop kills that host's sshd, its sessions, and the user's processes that were started
through that host's sshd (``SSH_CONNECTION`` in their environment names the host's
address as the server end); processes that cleared their environment survive.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import asyncssh
import psutil

SSHD = "/usr/sbin/sshd"
MAX_USERS = 16
# One account for every host: only addresses (127.0.0.10..) bound it (benchmarks).
MAX_SHARED_HOSTS = 240
USER_PREFIX = "dctest"
LOCK_DIR = Path("/tmp/distconsole-sshd-users")
SETUP_LINE = "source /opt/distconsole-test/venv/bin/activate"
CLUSTER_KEY_NAME = "id_distconsole_cluster"
CLUSTER_KNOWN_HOSTS = "known_hosts_distconsole_cluster"


def unavailable_reason() -> str | None:
    """Why real sshd hosts cannot be started here, or None when they can."""
    if not os.path.exists(SSHD):
        return f"{SSHD} is not installed (apt-get install openssh-server)"
    if os.geteuid() != 0:
        return "the sshd cluster creates test users and must run as root"
    return None


def ensure_user(name: str) -> pwd.struct_passwd:
    """Create a plain test user once; its shell must start fast and log in by key only."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "-m", "-s", "/bin/bash", name], check=True)
        entry = pwd.getpwnam(name)
    # "!" (useradd's default) marks the account locked, which sshd refuses without PAM.
    subprocess.run(["usermod", "-p", "*", name], check=True, capture_output=True)
    return entry


def _free_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def _write(path: Path, text: str, mode: int, owner: pwd.struct_passwd | None = None) -> None:
    path.write_text(text)
    path.chmod(mode)
    if owner is not None:
        os.chown(path, owner.pw_uid, owner.pw_gid)


@dataclass
class SshdHost:
    name: str
    address: str
    port: int
    user: str
    home: Path
    uid: int
    gid: int
    host_key_path: Path
    host_public_key: str  # "ssh-ed25519 AAAA..."
    config_path: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def known_hosts_line(self) -> str:
        return f"[{self.address}]:{self.port} {self.host_public_key}"


class SshdCluster:
    """N sshd hosts plus the files a client needs to reach them; see the module doc."""

    def __init__(
        self, root: Path, n: int, *, shared_account: bool = False, peer_ssh: bool = True
    ) -> None:
        most = MAX_SHARED_HOSTS if shared_account else MAX_USERS
        if not 1 <= n <= most:
            raise ValueError(f"n must be 1..{most}, got {n}")
        self.shared_account = shared_account
        # False: users get no ~/.ssh/config, key or known_hosts for reaching each other
        # (hosts before `distconsole keys`; pre-flight's all-to-all ssh check must fail).
        self.peer_ssh = peer_ssh
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.hosts: list[SshdHost] = []
        self._locks: list[IO[str]] = []
        client_key = asyncssh.generate_private_key("ssh-ed25519", comment="distconsole-test")
        self.client_key_path = root / "client_key"
        client_key.write_private_key(str(self.client_key_path))
        self.client_key_path.chmod(0o600)
        self.client_public_key = client_key.export_public_key().decode().strip()
        # A key that no host authorises, for auth-failed tests.
        other = asyncssh.generate_private_key("ssh-ed25519", comment="distconsole-unknown")
        self.wrong_identity_file = root / "wrong_key"
        other.write_private_key(str(self.wrong_identity_file))
        self.wrong_identity_file.chmod(0o600)
        # An empty known_hosts file, for host-key-rejected tests.
        self.empty_known_hosts = root / "empty_known_hosts"
        self.empty_known_hosts.write_text("")
        self.known_hosts_path = root / "known_hosts"
        self.inventory_path = root / "hosts.yaml"
        try:
            self._claim_users(1 if shared_account else n)
            self._create_hosts(n)
            if shared_account:
                self._start_all_on_one_port()
            else:
                for host in self.hosts:
                    self._start_sshd(host, allow_new_port=True)
            self._write_known_hosts()
            written: set[str] = set()
            for host in self.hosts:
                if host.user not in written:  # one shared home is written once
                    self._write_user_files(host)
                    written.add(host.user)
            self.write_inventory()
        except BaseException:
            self.close()
            raise

    # -- setup ---------------------------------------------------------------------------

    def _claim_users(self, n: int) -> None:
        LOCK_DIR.mkdir(mode=0o755, exist_ok=True)
        deadline = time.monotonic() + 120
        while True:
            for index in range(MAX_USERS):
                if len(self._locks) == n:
                    return
                handle = open(LOCK_DIR / f"{USER_PREFIX}{index}.lock", "w")  # noqa: SIM115
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    handle.close()
                    continue
                handle.write(str(os.getpid()))
                handle.flush()
                self._locks.append(handle)
            if len(self._locks) == n:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not claim {n} free {USER_PREFIX}N users in 120 s")
            time.sleep(0.2)

    def _create_hosts(self, n: int) -> None:
        users = [Path(handle.name).stem for handle in self._locks]
        for user in users:
            ensure_user(user)
            # A previous test may have left jobs running as this user.
            subprocess.run(["pkill", "-KILL", "-u", user], check=False)
        for i in range(n):
            user = users[0] if self.shared_account else users[i]
            entry = pwd.getpwnam(user)
            home = Path(entry.pw_dir)
            address = f"127.0.0.{10 + i}"
            hdir = self.root / f"node{i}"
            hdir.mkdir()
            key = asyncssh.generate_private_key("ssh-ed25519", comment=f"node{i}")
            key_path = hdir / "ssh_host_ed25519_key"
            key.write_private_key(str(key_path))
            key_path.chmod(0o600)
            self.hosts.append(
                SshdHost(
                    name=f"node{i}",
                    address=address,
                    port=_free_port(address),
                    user=user,
                    home=home,
                    uid=entry.pw_uid,
                    gid=entry.pw_gid,
                    host_key_path=key_path,
                    host_public_key=key.export_public_key().decode().strip(),
                    config_path=hdir / "sshd_config",
                    log_path=hdir / "sshd.log",
                )
            )

    def _tmpdir(self, host: SshdHost) -> Path:
        path = host.home / f".tmp-{host.name}"
        fresh: set[str] = getattr(self, "_fresh_tmp", set())
        if host.name not in fresh:
            # Emptied once per cluster, as a machine's /tmp at boot: homes outlive test
            # runs, and a stale Open MPI session directory (pid.N, reused by a later
            # mpirun with the same pid) is one more thing a job could trip over.
            shutil.rmtree(path, ignore_errors=True)
            fresh.add(host.name)
            self._fresh_tmp = fresh
        if not path.exists():
            path.mkdir(mode=0o700)
            os.chown(path, host.uid, host.gid)
        return path

    def _sshd_config(self, host: SshdHost) -> str:
        return "\n".join(
            [
                f"Port {host.port}",
                f"ListenAddress {host.address}",
                f"HostKey {host.host_key_path}",
                f"PidFile {host.config_path.parent / 'sshd.pid'}",
                f"AllowUsers {host.user}",
                "AuthorizedKeysFile .ssh/authorized_keys",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin no",
                "UsePAM no",
                "UseDNS no",
                "PrintMotd no",
                "PrintLastLog no",
                # OpenSSH's default, stated: the console multiplexes sampler, log
                # followers, job watches and commands on one connection and must stay
                # within it (console/transport/sessions.py).
                "MaxSessions 10",
                "MaxStartups 64:30:128",
                "LogLevel INFO",
                "Subsystem sftp internal-sftp",
                # Each host its own /tmp, as separate machines have: hosts sharing one
                # account (and all sharing this machine's name) would otherwise share
                # Open MPI's session directory, where mpirun and the orteds of one job
                # wrote the same files (an orted segfaulted in hwloc now and then).
                f"SetEnv TMPDIR={self._tmpdir(host)}",
                "",
            ]
        )

    def _start_sshd(self, host: SshdHost, *, allow_new_port: bool = False) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        for _attempt in range(5):
            host.config_path.write_text(self._sshd_config(host))
            if host._log is None:
                host._log = open(host.log_path, "ab")  # noqa: SIM115
            host.process = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(host.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=host._log,
                stderr=host._log,
            )
            if self._wait_listening(host, timeout=10):
                return
            if host.process.poll() is None:
                host.process.kill()
                host.process.wait()
            if not allow_new_port:
                break
            host.port = _free_port(host.address)  # someone took the port in between
        log = host.log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"sshd for {host.name} did not start on {host.port}:\n{log}")

    def _start_all_on_one_port(self) -> None:
        """Every sshd on the same port number, each on its own address (shared_account)."""
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        addresses = [h.address for h in self.hosts]
        for _attempt in range(5):
            port = _common_free_port(addresses)
            for host in self.hosts:
                host.port = port
            try:
                for host in self.hosts:
                    self._start_sshd(host)
                return
            except RuntimeError:
                # Someone took the port on one address in between: start all again.
                for host in self.hosts:
                    self._kill_sshd(host)
        raise RuntimeError(f"could not start {len(self.hosts)} sshds on one common port")

    def _kill_sshd(self, host: SshdHost) -> None:
        if host.process is not None and host.process.poll() is None:
            host.process.kill()
            host.process.wait()

    def _wait_listening(self, host: SshdHost, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert host.process is not None
            if host.process.poll() is not None:
                return False
            try:
                with socket.create_connection((host.address, host.port), timeout=0.5):
                    return True
            except OSError:
                time.sleep(0.01)
        return False

    def _write_known_hosts(self) -> None:
        text = "".join(h.known_hosts_line + "\n" for h in self.hosts)
        self.known_hosts_path.write_text(text)

    def _write_user_files(self, host: SshdHost) -> None:
        owner = pwd.getpwnam(host.user)
        shutil.rmtree(host.home / "distconsole", ignore_errors=True)
        # Debian's skel rc files only cost time; a test user's shell needs nothing.
        for rc in (".bashrc", ".profile", ".bash_logout"):
            with contextlib.suppress(FileNotFoundError):
                (host.home / rc).unlink()
        _write(
            host.home / ".bashrc", "# distconsole test user: intentionally empty\n", 0o644, owner
        )
        ssh_dir = host.home / ".ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        os.chown(ssh_dir, owner.pw_uid, owner.pw_gid)
        ssh_dir.chmod(0o700)
        _write(ssh_dir / "authorized_keys", self.client_public_key + "\n", 0o600, owner)
        if not self.peer_ssh:
            for name in (CLUSTER_KEY_NAME, CLUSTER_KNOWN_HOSTS, "config"):
                with contextlib.suppress(FileNotFoundError):
                    (ssh_dir / name).unlink()
            return
        _write(ssh_dir / CLUSTER_KEY_NAME, self.client_key_path.read_text(), 0o600, owner)
        _write(ssh_dir / CLUSTER_KNOWN_HOSTS, self.known_hosts_path.read_text(), 0o600, owner)
        entries = []
        for other in self.hosts:
            entries.append(
                f"Host {other.address} {other.name}\n"
                f"  HostName {other.address}\n"
                f"  Port {other.port}\n"
                f"  User {other.user}\n"
                f"  IdentityFile ~/.ssh/{CLUSTER_KEY_NAME}\n"
                f"  IdentitiesOnly yes\n"
                f"  UserKnownHostsFile ~/.ssh/{CLUSTER_KNOWN_HOSTS}\n"
                f"  StrictHostKeyChecking yes\n"
                f"  BatchMode yes\n"
            )
        _write(ssh_dir / "config", "\n".join(entries), 0o600, owner)

    # -- API -----------------------------------------------------------------------------

    def host(self, name: str) -> SshdHost:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def write_inventory(self, path: Path | None = None, **defaults_overrides: Any) -> Path:
        """Write hosts.yaml (default: ``inventory_path``); overrides replace/extend defaults.

        An override set to None removes that default key.
        """
        defaults: dict[str, Any] = {
            "identity_file": str(self.client_key_path),
            "known_hosts": str(self.known_hosts_path),
            "connect_timeout": 3,
            "work_dir": "~/distconsole",
            "setup": SETUP_LINE,
        }
        defaults.update(defaults_overrides)
        defaults = {k: v for k, v in defaults.items() if v is not None}
        lines = ["defaults:"]
        lines += [f"  {key}: {_yaml_scalar(value)}" for key, value in defaults.items()]
        lines.append("hosts:")
        for host in self.hosts:
            lines += [
                f"  - name: {host.name}",
                f"    address: {host.address}",
                f"    port: {host.port}",
                f"    user: {host.user}",
            ]
        target = path or self.inventory_path
        target.write_text("\n".join(lines) + "\n")
        return target

    def stop(self, name: str) -> None:
        """Take a host away: sshd stops and every established session drops.

        Separate accounts: every process of the host's user is killed too. Shared
        account: only the user's processes started through this host's sshd are (see
        the module doc), since the user's other processes belong to the other hosts.
        """
        host = self.host(name)
        if host.process is not None and host.process.poll() is None:
            try:
                sessions = psutil.Process(host.process.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                sessions = []
            host.process.send_signal(signal.SIGTERM)
            for proc in sessions:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.kill()
            try:
                host.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                host.process.kill()
                host.process.wait()
        if not self.shared_account:
            subprocess.run(["pkill", "-KILL", "-u", host.user], check=False)
            return
        for proc in self.processes_of(name):
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()

    def processes_of(self, name: str) -> list[psutil.Process]:
        """The host user's live processes started through ``name``'s sshd (by the server
        address in their ``SSH_CONNECTION``); on a shared account the only way to tell
        one loopback "host"'s processes from another's."""
        host = self.host(name)
        found = []
        for proc in psutil.process_iter(["uids", "status"]):
            try:
                if proc.info["uids"] is None or proc.info["uids"].real != host.uid:
                    continue
                if proc.info["status"] == psutil.STATUS_ZOMBIE:
                    continue
                connection = proc.environ().get("SSH_CONNECTION", "").split()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if len(connection) == 4 and connection[2] == host.address:
                found.append(proc)
        return found

    def _sshd_tree(self, name: str) -> list[psutil.Process]:
        host = self.host(name)
        if host.process is None or host.process.poll() is not None:
            return []
        try:
            listener = psutil.Process(host.process.pid)
            return [listener, *listener.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def freeze(self, name: str) -> None:
        """Make a host hang: sshd and its sessions are SIGSTOPped, TCP stays open, nothing
        answers (only keepalives or timeouts notice). Undo with :meth:`thaw`."""
        stopped: set[int] = set()
        # A session may fork its post-auth child while we walk the tree: walk again until
        # a pass finds nothing new (a stopped parent cannot fork any more).
        for _pass in range(5):
            fresh = [p for p in self._sshd_tree(name) if p.pid not in stopped]
            if not fresh:
                break
            for proc in fresh:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.suspend()
                stopped.add(proc.pid)

    def thaw(self, name: str) -> None:
        for proc in self._sshd_tree(name):
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.resume()

    def start(self, name: str) -> None:
        """Bring a stopped host back on the same address, port and host key."""
        host = self.host(name)
        if not host.running:
            self._start_sshd(host)

    def close(self) -> None:
        for host in self.hosts:
            with contextlib.suppress(Exception):
                self.stop(host.name)
            if host._log is not None:
                host._log.close()
                host._log = None
        for handle in self._locks:
            user = Path(handle.name).stem
            subprocess.run(["pkill", "-KILL", "-u", user], check=False)
            handle.close()  # releases the flock
        self._locks.clear()


def _common_free_port(addresses: list[str]) -> int:
    """A port number that is free on every one of ``addresses`` right now."""
    for _attempt in range(50):
        port = _free_port(addresses[0])
        try:
            for address in addresses[1:]:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    sock.bind((address, port))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no port free on all of {', '.join(addresses)}")


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, dict):
        inner = ", ".join(f"{k}: {_yaml_scalar(v)}" for k, v in value.items())
        return "{" + inner + "}"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


@dataclass(frozen=True)
class BlackHole:
    """A loopback TCP port that completes the handshake but never says a word."""

    address: str
    port: int


@contextlib.contextmanager
def black_hole_socket(address: str = "127.0.0.9") -> Iterator[BlackHole]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        # Never accept(): the kernel finishes the TCP handshake from the backlog, so
        # the client connects and then waits forever for the SSH banner.
        sock.listen(64)
        yield BlackHole(address, int(sock.getsockname()[1]))
