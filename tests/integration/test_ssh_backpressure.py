"""A byte stream read slower than the host writes it: what waits must stay on the host.

asyncssh resumes a paused channel with a whole new window while its buffer still holds
what came during the pause; a reader that reads a chunk at a time then made the console
hold a window more per read (70 MiB under the log benchmark's firehose).
``ssh_process.resume_when_drained`` keeps it within two windows. Real sshd, real asyncssh.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from sshd_cluster import SshdCluster

from console.inventory import Host
from console.transport import ClusterConnections
from console.transport.ssh_process import SshRemoteProcess

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(120)]

WINDOW = 2 * 1024 * 1024  # asyncssh's default channel window (and stream limit)
TOTAL = 48 * 1024 * 1024


def _hosts(cluster: SshdCluster) -> list[Host]:
    return [
        Host(name=h.name, address=h.address, port=h.port, user=h.user,
             identity_file=str(cluster.client_key_path),
             known_hosts=str(cluster.known_hosts_path), connect_timeout=3.0)
        for h in cluster.hosts
    ]  # fmt: skip


def _held(process: Any) -> int:
    """Bytes asyncssh holds for this process: its stream's buffer and its channel's."""
    channel = process.channel
    return int(process._recv_buf_len) + sum(
        len(data) for data, _ in channel._recv_buf if isinstance(data, bytes)
    )


async def test_slow_reader_keeps_the_rest_on_the_host(
    sshd_cluster: Callable[..., SshdCluster],
) -> None:
    cluster = sshd_cluster(n=1)
    async with ClusterConnections(_hosts(cluster)) as pool:
        await pool.wait_settled()
        remote = await pool["node0"].start_bytes(f"head -c {TOTAL} /dev/zero")
        assert isinstance(remote, SshRemoteProcess)
        inner = remote._process
        got, most = 0, 0
        async for data in remote.chunks():
            got += len(data)
            assert data.count(0) == len(data)
            # Slower than the link: the host's writer is always ahead of this reader.
            await asyncio.sleep(0.01)
            most = max(most, _held(inner))
        assert got == TOTAL
        assert await remote.wait() == 0
        assert most <= 2 * WINDOW + 64 * 1024, f"asyncssh held {most / 2**20:.1f} MiB"
