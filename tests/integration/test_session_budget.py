"""The console stays within sshd's default MaxSessions (10) on one connection: more
commands than that at once wait in line for a session instead of being refused, and a
budget held for good fails with an error saying what holds it. Real OpenSSH sshd with
its default MaxSessions (tests/sshd_cluster.py states it)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from sshd_cluster import SshdCluster

from console.errors import TransportError
from console.inventory import Host
from console.transport import ClusterConnections
from console.transport.sessions import SESSIONS_PER_CONNECTION, SessionsBusy
from console.transport.ssh import SshConnection

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(90)]

Factory = Callable[..., SshdCluster]
GATE = "read -r go; echo released"  # holds its session until a line arrives


def hosts_of(cluster: SshdCluster, **overrides: Any) -> list[Host]:
    return [
        Host(
            name=h.name,
            address=h.address,
            port=h.port,
            user=h.user,
            identity_file=str(cluster.client_key_path),
            known_hosts=str(cluster.known_hosts_path),
            connect_timeout=5.0,
            **overrides,
        )
        for h in cluster.hosts
    ]


async def until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.02)


async def test_more_sessions_than_maxsessions_wait_in_line(sshd_cluster: Factory) -> None:
    cluster = sshd_cluster(n=1)
    async with ClusterConnections(hosts_of(cluster)) as pool:
        await pool.wait_settled()
        conn = pool["node0"]
        assert isinstance(conn, SshConnection)
        budget = conn.sessions
        # 14 long-lived programs and 6 commands at once: twice sshd's 10.
        starts = [asyncio.create_task(conn.start(GATE)) for _ in range(14)]
        runs = [asyncio.create_task(conn.run("echo ran", timeout=60)) for _ in range(6)]
        # The first 8 (the starts, created first) have their channels; the rest wait.
        await until(lambda: sum(t.done() for t in starts) == 8 and budget.waiting == 12)
        assert budget.in_use == SESSIONS_PER_CONNECTION
        started = [t.result() for t in starts if t.done()]
        assert len(started) == SESSIONS_PER_CONNECTION
        # Each started program let go frees a session for the next in line.
        pending = list(starts)
        while pending:
            await until(lambda: any(t.done() for t in pending))
            task = next(t for t in pending if t.done())
            pending.remove(task)
            process = task.result()
            await process.write("go\n")
            assert [line async for line in process.lines()] == ["released"]
            assert await process.wait() == 0
        outcomes = await asyncio.gather(*runs)
        assert [o.stdout for o in outcomes] == ["ran\n"] * 6
        assert budget.peak == SESSIONS_PER_CONNECTION and budget.queued >= 12
        await until(lambda: budget.in_use == 0)


async def test_sshd_really_refuses_past_its_default(sshd_cluster: Factory) -> None:
    """The control: without the budget (here 12 > 10) the same load is refused by sshd,
    so the test above passes because of the limiter, not a lenient server."""
    cluster = sshd_cluster(n=1)
    async with ClusterConnections(hosts_of(cluster), sessions_per_host=12) as pool:
        await pool.wait_settled()
        conn = pool["node0"]
        held = [await conn.start(GATE) for _ in range(10)]
        with pytest.raises(TransportError, match="MaxSessions"):
            await conn.run("true")
        for process in held:
            process.close()


async def test_a_budget_held_for_good_is_a_clear_error(sshd_cluster: Factory) -> None:
    cluster = sshd_cluster(n=1)
    async with ClusterConnections(hosts_of(cluster), session_wait_s=1.0) as pool:
        await pool.wait_settled()
        conn = pool["node0"]
        held = [await conn.start(GATE) for _ in range(SESSIONS_PER_CONNECTION)]
        with pytest.raises(SessionsBusy) as busy:
            await conn.run("echo never")
        message = str(busy.value)
        assert message.startswith("node0: all 8 SSH sessions")
        assert "MaxSessions" in message and "read -r go" in message, message
        held.pop().close()
        assert (await conn.run("echo ok")).stdout == "ok\n"
        for process in held:
            process.close()
