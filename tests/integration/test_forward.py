"""Port forwarding over the hosts' own SSH connections, on real sshd hosts: an HTTP
server started on node1 (as node1's user, on 127.0.0.1) answers a GET on this
machine's 127.0.0.1:L, through `distconsole forward` and through ``PortForwards``;
a forward whose host goes away waits for it and forwards again when it is back (or,
with ``reconnect=False``, ends with a reason)."""

from __future__ import annotations

import asyncio
import os
import select
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from console import inventory as inventory_module
from console.transport.base import RemoteProcess
from console.transport.forward import Forward, ForwardError, PortForwards, parse_target
from console.transport.pool import ClusterConnections
from tests.sshd_cluster import SshdCluster

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.sshd


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return str(answer.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def read_line(stream: Any, timeout: float = 60) -> str:
    ready, _, _ = select.select([stream], [], [], timeout)
    return str(stream.readline()) if ready else ""


async def serve_on(pool: ClusterConnections, host: str, port: int) -> RemoteProcess:
    """An HTTP server on ``host``, as its user, answering /who.txt with the host's name."""
    line = (
        f'cd "$(mktemp -d)" && echo {host} > who.txt && '
        f"exec python3 -m http.server {port} --bind 127.0.0.1"
    )
    return await pool[host].start(line)


def test_parse_target() -> None:
    assert parse_target("node1:8265") == ("node1", "localhost", 8265)
    assert parse_target("node1:10.0.0.5:6006") == ("node1", "10.0.0.5", 6006)
    for bad in ("node1", "node1:x", ":80", "node1:0"):
        with pytest.raises(ValueError):
            parse_target(bad)


def test_forward_command_reaches_a_server_on_node1(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=2)
    path = cluster.write_inventory(tmp_path / "hosts.yaml")
    inventory = inventory_module.load(path)
    remote, local = free_port(), free_port()

    async def scenario() -> None:
        async with ClusterConnections(inventory) as pool:
            await pool.wait_settled()
            server = await serve_on(pool, "node1", remote)
            proc = subprocess.Popen(
                [sys.executable, "-m", "console", "forward", str(path), f"node1:{remote}",
                 "--local-port", str(local)],
                cwd=REPO, env=dict(os.environ), stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            try:
                assert proc.stdout is not None
                ready, _, _ = await asyncio.to_thread(select.select, [proc.stdout], [], [], 60)
                first = proc.stdout.readline() if ready else ""
                assert f"127.0.0.1:{local} -> node1 localhost:{remote}" in first, first + (
                    proc.stderr.read() if proc.poll() is not None and proc.stderr else ""
                )
                body = await asyncio.to_thread(get, f"http://127.0.0.1:{local}/who.txt")
                assert body.strip() == "node1"
                # The host going away and coming back: said on stderr, once each.
                assert proc.stderr is not None
                await asyncio.to_thread(cluster.stop, "node1")
                lost = await asyncio.to_thread(read_line, proc.stderr)
                assert lost.startswith("distconsole forward: waiting: ") and "node1" in lost
                await asyncio.to_thread(cluster.start, "node1")
                back = await asyncio.to_thread(read_line, proc.stderr)
                assert back.startswith("distconsole forward: forwarding again: 127.0.0.1:")
                assert proc.poll() is None
            finally:
                proc.terminate()
                proc.wait(timeout=15)
                server.close()

    asyncio.run(scenario())


async def test_forwards_live_until_closed_and_end_with_their_host(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=2)
    inventory = inventory_module.load(cluster.write_inventory(tmp_path / "hosts.yaml"))
    remote = free_port()
    changes: list[int] = []
    async with ClusterConnections(inventory) as pool:
        await pool.wait_settled()
        server = await serve_on(pool, "node1", remote)
        forwards = PortForwards(pool, on_change=lambda: changes.append(len(forwards.live())))
        opened = await forwards.open("node1", remote)  # any free local port
        assert opened.local_port > 0 and opened.live
        body = await asyncio.to_thread(get, f"http://127.0.0.1:{opened.local_port}/who.txt")
        assert body.strip() == "node1"
        with pytest.raises(ForwardError, match="no host 'node9'"):
            await forwards.open("node9", remote)
        with pytest.raises(ForwardError, match="cannot listen"):
            await _taken_port_forward(forwards)
        await forwards.close(opened.local_port)
        assert forwards.forwards() == []
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{opened.local_port}/", timeout=3)

        # A forward whose host goes away waits for it, says why, and listens on the same
        # port once the pool has reconnected.
        again = await forwards.open("node1", remote)
        server.close()
        await asyncio.to_thread(cluster.stop, "node1")
        waiting = await wait_for_forward(forwards, again.local_port, lambda f: bool(f.waiting))
        assert waiting.live and waiting.waiting and "connection closed" in waiting.waiting
        assert "waiting for node1 to come back" in waiting.text()
        await asyncio.to_thread(cluster.start, "node1")
        back = await wait_for_forward(forwards, again.local_port, lambda f: not f.waiting)
        assert back.live and back.text().endswith("node1 localhost:" + str(remote))
        server = await serve_on(pool, "node1", remote)
        body = await asyncio.to_thread(get, f"http://127.0.0.1:{again.local_port}/who.txt")
        assert body.strip() == "node1"
        server.close()
        await forwards.close_all()
        assert changes[:3] == [1, 0, 1] and changes[-1] == 0

        # Told not to wait, a forward whose host goes away ends, and says why.
        once = PortForwards(pool, reconnect=False)
        single = await once.open("node1", remote)
        await asyncio.to_thread(cluster.stop, "node1")
        ended = await asyncio.wait_for(once.wait_ended(single.local_port), 60)
        assert not ended.live and ended.ended and "connection closed" in ended.ended
        assert "ended (" in ended.text()
        await once.close_all()


async def wait_for_forward(
    forwards: PortForwards, port: int, condition: Callable[[Forward], bool]
) -> Forward:
    deadline = time.monotonic() + 60
    while True:
        [found] = [f for f in forwards.forwards() if f.local_port == port]
        if condition(found) or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.1)


async def _taken_port_forward(forwards: PortForwards) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        await forwards.open("node0", 22, local_port=taken.getsockname()[1])


async def test_a_demo_host_forwards_to_its_loopback(tmp_path: Path) -> None:
    from console.transport.demo import DemoCluster

    async with DemoCluster(2) as cluster:
        inventory = inventory_module.load(cluster.inventory_path)
        remote = free_port()
        async with ClusterConnections(inventory) as pool:
            await pool.wait_settled()
            server = await serve_on(pool, "node1", remote)
            forwards = PortForwards(pool)
            opened = await forwards.open("node1", remote)
            body = await asyncio.to_thread(get, f"http://127.0.0.1:{opened.local_port}/who.txt")
            assert body.strip() == "node1"
            await forwards.close_all()
            server.close()
