"""The embedded demo cluster and `distconsole demo`, over real SSH connections.

`distconsole demo --serve` runs as a real subprocess; commands are real bash processes
reached through asyncssh clients, with host keys verified against the demo's known_hosts.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import select
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from console.inventory import Host, Inventory, load
from console.transport.base import CommandResult, HostState
from console.transport.demo import DemoCluster
from console.transport.pool import ClusterConnections

REPO = Path(__file__).resolve().parents[2]


class Served:
    def __init__(self, proc: subprocess.Popen[str], inventory_path: Path) -> None:
        self.proc = proc
        self.inventory_path = inventory_path
        self.inventory: Inventory = load(inventory_path)


def _start_serve(*extra: str) -> Served:
    proc = subprocess.Popen(
        [sys.executable, "-m", "console", "demo", "--serve", *extra],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    if not ready:
        _end(proc)
        pytest.fail("distconsole demo --serve printed nothing within 60 s")
    first = proc.stdout.readline().strip()
    if not first:
        _end(proc)
        error = proc.stderr.read() if proc.stderr else ""
        pytest.fail(f"distconsole demo --serve exited early: {error}")
    return Served(proc, Path(first))


def _end(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    server = _start_serve("--hosts", "3")
    yield server
    _end(server.proc)


def _connect(host: Host, **overrides: object) -> Any:
    """asyncssh.connect with the host's inventory options (awaitable / async with)."""
    options: dict[str, object] = {
        "port": host.port,
        "username": host.user,
        "client_keys": [host.identity_file],
        "known_hosts": host.known_hosts,
        "agent_path": None,
        "config": None,
    }
    options.update(overrides)
    return asyncssh.connect(host.address, **options)


def test_serve_first_line_is_a_loadable_inventory(served: Served) -> None:
    hosts = served.inventory.hosts
    assert [h.name for h in hosts] == ["node0", "node1", "node2"]
    # Told apart by address, as on a real cluster: one port (like sshd's 22) for all.
    assert [h.address for h in hosts] == ["127.42.0.1", "127.42.0.2", "127.42.0.3"]
    assert len({h.port for h in hosts}) == 1
    assert all(h.interface == "lo" for h in hosts)
    assert all(h.gpus == 4 and h.gpu_source == "simulated" for h in hosts)
    assert all(h.python == sys.executable for h in hosts)
    assert not any(h.insecure_host_keys for h in hosts)
    assert [h.tags for h in hosts] == [("demo", "a100"), ("demo", "h100"), ("demo", "a100")]
    assert served.inventory.select(tags=["h100"]) == (hosts[1],)
    for host in hosts:
        assert host.identity_file is not None and Path(host.identity_file).is_file()
        assert host.known_hosts is not None and Path(host.known_hosts).is_file()
        assert Path(host.work_dir).is_dir()


async def test_commands_run_on_every_host_with_its_home_and_exit_status(served: Served) -> None:
    root = served.inventory_path.parent
    async with ClusterConnections(served.inventory) as pool:
        statuses = await pool.wait_settled()
        assert {s.state for s in statuses.values()} == {HostState.UP}, statuses
        outcomes = await pool.run_all(
            'printf "%s\\n" "$HOME" "$PWD" "$DISTCONSOLE_DEMO_HOST"; exit "${HOME: -6:1}"'
        )
    for number, host in enumerate(served.inventory.hosts):
        result = outcomes[host.name]
        assert isinstance(result, CommandResult), result
        home = str(root / host.name / "home")
        assert result.stdout == f"{home}\n{home}\n{host.name}\n"
        assert result.exit_status == number  # the digit in .../node<N>/home


async def test_the_pool_refuses_a_host_whose_key_is_not_known(
    served: Served, tmp_path: Path
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    host = served.inventory.hosts[0].model_copy(update={"known_hosts": str(empty)})
    async with ClusterConnections([host], reconnect=False) as pool:
        status = (await pool.wait_settled())[host.name]
    assert status.state is HostState.HOST_KEY_REJECTED


async def test_stdin_stdout_and_stderr_are_bridged(served: Served) -> None:
    host = served.inventory.hosts[0]
    async with _connect(host) as conn:
        result = await conn.run("tr a-z A-Z; echo to-stderr >&2", input="hello demo\n")
    assert result.stdout == "HELLO DEMO\n"
    assert result.stderr == "to-stderr\n"
    assert result.exit_status == 0


async def test_megabytes_pass_both_ways_intact(served: Served) -> None:
    host = served.inventory.hosts[1]
    payload = os.urandom(3 * 1024 * 1024).hex()  # 6 MiB of text in, its digest and 6 MiB out
    async with _connect(host) as conn:
        result = await conn.run("tee /dev/stderr | sha256sum >&2; cat /dev/null", input=payload)
        echoed = await conn.run("head -c 6291456 /dev/zero | tr '\\0' x")
    digest = hashlib.sha256(payload.encode()).hexdigest()
    assert result.stderr == payload + f"{digest}  -\n"
    assert echoed.stdout == "x" * 6291456


async def test_hosts_run_the_consoles_python(served: Served) -> None:
    host = served.inventory.hosts[2]
    async with _connect(host) as conn:
        result = await conn.run(
            shlex.join([host.python, "-c", "import sys, os; print(sys.executable, os.getcwd())"])
        )
    home = served.inventory_path.parent / "node2" / "home"
    assert str(result.stdout).split() == [sys.executable, str(home)]


async def test_a_wrong_known_hosts_is_refused(served: Served, tmp_path: Path) -> None:
    node0, node1 = served.inventory.hosts[:2]
    assert node1.known_hosts is not None
    # node1's real key filed under node0's address: node0's key then matches nothing.
    lines = Path(node1.known_hosts).read_text().splitlines()
    node1_key = next(line for line in lines if line.startswith(f"[{node1.address}]:"))
    wrong = tmp_path / "known_hosts"
    wrong.write_text(node1_key.replace(f"[{node1.address}]", f"[{node0.address}]") + "\n")
    with pytest.raises(asyncssh.HostKeyNotVerifiable):
        async with _connect(node0, known_hosts=str(wrong)):
            pass
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    with pytest.raises(asyncssh.HostKeyNotVerifiable):
        async with _connect(node0, known_hosts=str(empty)):
            pass


async def test_a_key_the_hosts_do_not_know_is_refused(served: Served, tmp_path: Path) -> None:
    stranger = asyncssh.generate_private_key("ssh-ed25519")
    with pytest.raises(asyncssh.PermissionDenied):
        async with _connect(served.inventory.hosts[0], client_keys=[stranger]):
            pass


def test_sigint_stops_the_server_with_exit_0_and_removes_its_folder() -> None:
    server = _start_serve("--hosts", "2")
    root = server.inventory_path.parent
    assert root.is_dir()
    server.proc.send_signal(signal.SIGINT)
    assert server.proc.wait(timeout=30) == 0
    assert not root.exists()


def test_sigterm_with_dir_keeps_the_folder(tmp_path: Path) -> None:
    keep = tmp_path / "demo"
    server = _start_serve("--hosts", "1", "--dir", str(keep))
    assert server.inventory_path == keep.resolve() / "hosts.yaml"
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=30) == 0
    assert (keep / "hosts.yaml").is_file()
    assert (keep / "node0" / "home").is_dir()


@pytest.mark.parametrize("value", ["0", "257", "many"])
def test_bad_host_count_exits_2_naming_the_option(value: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "console", "demo", "--serve", "--hosts", value],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--hosts" in result.stderr
    assert result.stdout == ""


async def test_the_pool_sees_a_stopped_host_down_and_back_up() -> None:
    async with DemoCluster(2) as cluster:
        inventory = load(cluster.inventory_path)
        async with ClusterConnections(inventory) as pool:
            assert {s.state for s in (await pool.wait_settled()).values()} == {HostState.UP}
            await cluster.stop_host("node1")
            await _wait_for_state(pool, "node1", HostState.DOWN)
            result = await pool["node0"].run("echo alive")
            assert result.stdout == "alive\n"
            await cluster.start_host("node1")
            pool.reconnect_now("node1")
            await _wait_for_state(pool, "node1", HostState.UP)
            assert (await pool["node1"].run("echo $DISTCONSOLE_DEMO_HOST")).stdout == "node1\n"


async def _wait_for_state(pool: ClusterConnections, name: str, state: HostState) -> None:
    deadline = time.monotonic() + 10
    while pool.statuses()[name].state is not state:
        if time.monotonic() > deadline:
            pytest.fail(f"{name} is {pool.statuses()[name]}, expected {state}")
        await asyncio.sleep(0.05)


async def test_stop_host_drops_it_and_start_host_brings_it_back() -> None:
    async with DemoCluster(2) as cluster:
        inventory = load(cluster.inventory_path)
        node0, node1 = inventory.hosts
        conn = await _connect(node0)
        other = await _connect(node1)
        await cluster.stop_host("node0")
        await asyncio.wait_for(conn.wait_closed(), 5)
        with pytest.raises(OSError):
            await _connect(node0)
        assert (await other.run("echo still-up")).stdout == "still-up\n"
        await cluster.start_host("node0")
        assert cluster.node("node0").port == node0.port
        # Same port, same host key: the known_hosts written at start still verifies it.
        async with _connect(node0) as again:
            assert (await again.run("echo back")).stdout == "back\n"
        other.close()


async def test_a_setsid_process_outlives_its_connection_until_the_cluster_stops() -> None:
    async with DemoCluster(1) as cluster:
        host = load(cluster.inventory_path).hosts[0]
        async with _connect(host) as conn:
            result = await conn.run("setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!")
        pid = int(str(result.stdout))
        await asyncio.sleep(0.3)
        os.kill(pid, 0)  # still running after the connection closed
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail(f"process {pid} survived DemoCluster.stop()")


async def test_a_channel_signal_reaches_the_process_and_its_exit_signal_comes_back() -> None:
    async with DemoCluster(1) as cluster:
        host = load(cluster.inventory_path).hosts[0]
        async with _connect(host) as conn:
            process = await conn.create_process("echo started; sleep 60")
            assert (await process.stdout.readline()) == "started\n"
            process.send_signal("TERM")
            await asyncio.wait_for(process.wait_closed(), 5)
        assert process.exit_signal is not None and process.exit_signal[0] == "TERM"
        assert process.returncode == -signal.SIGTERM


async def test_stop_host_can_power_off_only_that_hosts_processes() -> None:
    async with DemoCluster(2) as cluster:
        pids: dict[str, int] = {}
        for host in load(cluster.inventory_path).hosts:
            async with _connect(host) as conn:
                result = await conn.run("setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!")
            pids[host.name] = int(str(result.stdout))
        await cluster.stop_host("node0", kill_processes=True)
        with pytest.raises(ProcessLookupError):
            os.kill(pids["node0"], 0)
        os.kill(pids["node1"], 0)  # the other host's job is untouched


async def test_a_signal_after_stdin_eof_still_reaches_the_process() -> None:
    """As with sshd: a client that closed stdin (run() does) can still KILL the command."""
    async with DemoCluster(1) as cluster:
        host = load(cluster.inventory_path).hosts[0]
        async with _connect(host) as conn:
            process = await conn.create_process("echo started; exec sleep 60")
            assert (await process.stdout.readline()) == "started\n"
            process.stdin.write_eof()
            await asyncio.sleep(0.1)
            process.send_signal("KILL")
            await asyncio.wait_for(process.wait_closed(), 5)
        assert process.exit_signal is not None and process.exit_signal[0] == "KILL"


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGKILL])
def test_serve_ended_by_a_signal_leaves_no_process_behind(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """`demo --serve` whose terminal closes (SIGHUP) or that is killed outright: the
    detached processes its hosts started end too (SIGHUP: its own stop; SIGKILL: its
    reaper)."""
    server = _start_serve("--hosts", "1", "--dir", str(tmp_path / "demo"))
    marker = f"sleep 6{os.getpid() % 100:02d}"
    try:
        host = server.inventory.hosts[0]

        async def detach() -> None:
            async with _connect(host) as conn:
                await conn.run(f"setsid {marker} </dev/null >/dev/null 2>&1 &", check=True)

        asyncio.run(detach())
        deadline = time.monotonic() + 10  # the backgrounded setsid may not have exec'd yet
        while not _processes_with(marker):
            assert time.monotonic() < deadline, f"{marker} never started"
            time.sleep(0.1)
        server.proc.send_signal(sig)
        server.proc.wait(timeout=30)
        deadline = time.monotonic() + 20
        while _processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _processes_with(marker) == []
    finally:
        _end(server.proc)


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if cmdline.decode(errors="replace").strip() == marker:
                found.append(int(pid))
    return found
