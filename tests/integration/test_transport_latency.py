"""The connection's latency is measured again every keepalive interval on real sshd, not
only when connecting: a host that answers slowly shows it, and recovers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sshd_cluster import SshdCluster

from console import inventory as inventory_module
from console.transport.base import HostState, HostStatus
from console.transport.ssh import SshConnection

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(90)]


async def connected(
    cluster: SshdCluster, tmp_path: Path, keepalive: float
) -> tuple[SshConnection, list[HostStatus]]:
    path = cluster.write_inventory(tmp_path / "hosts.yaml", keepalive_interval=keepalive)
    host = inventory_module.load(path).hosts[0]
    seen: list[HostStatus] = []
    connection = SshConnection(host, on_status=seen.append)
    connection.begin()
    deadline = time.monotonic() + 20
    while connection.status.state is not HostState.UP:
        assert time.monotonic() < deadline, connection.status
        await asyncio.sleep(0.05)
    return connection, seen


async def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def test_latency_follows_the_host_every_keepalive_interval(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=1)
    connection, seen = await connected(cluster, tmp_path, keepalive=0.5)
    try:
        at_connect = connection.status.latency_ms
        assert at_connect is not None
        # Each interval the status carries the new figure (readers such as the UI poll
        # it)...
        latencies: list[float] = []

        def remeasured() -> bool:
            ms = connection.status.latency_ms
            if ms is not None and ms != at_connect and (not latencies or latencies[-1] != ms):
                latencies.append(ms)
            return len(latencies) >= 2

        await wait_for(remeasured, 10, f"latencies: {latencies}")
        # A keepalive's round trip is far below a connect (key exchange, auth).
        assert all(ms < at_connect for ms in latencies), (at_connect, latencies)
        assert (await connection.round_trip_ms() or 0) > 0
        # ...without announcing it: listeners take announcements as state changes.
        assert [s.state for s in seen] == [HostState.UP]

        # sshd stopped for 0.8 s (under keepalive_count_max x interval: it stays up):
        # the keepalive sent meanwhile is answered late, and the status says so.
        name = cluster.hosts[0].name
        cluster.freeze(name)
        await asyncio.sleep(0.8)
        cluster.thaw(name)
        await wait_for(
            lambda: (connection.status.latency_ms or 0) >= 200, 5, f"no slow figure: {latencies}"
        )
        assert connection.status.state is HostState.UP
        # ...and the next ones are quick again.
        await wait_for(
            lambda: (connection.status.latency_ms or 1e9) < 100, 5, "stays slow after the stall"
        )
    finally:
        await connection.close()


async def test_no_keepalives_no_latency_probes(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=1)
    connection, _seen = await connected(cluster, tmp_path, keepalive=0)
    try:
        at_connect = connection.status.latency_ms
        await asyncio.sleep(1.0)
        assert connection.status.latency_ms == at_connect  # the connect's figure only
    finally:
        await connection.close()
