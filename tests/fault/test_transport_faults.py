"""The ssh transport and pool against a SCRIPTED in-process SSH server (tests/scripted_ssh.py):
states, reconnects, refused channels, exit statuses and signals, host keys. No root."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncssh
import pytest
from scripted_ssh import Reply, ScriptedSshServer, Stream

from console.errors import CommandTimeout, HostUnavailable, TransportError
from console.transport import ClusterConnections, HostState, ssh
from console.transport.base import HostStatus
from console.transport.ssh import backoff_delay
from console.transport.ssh_commands import OPEN_RETRY_S

pytestmark = pytest.mark.timeout(30)

Scripted = Callable[..., Awaitable[ScriptedSshServer]]


def pool_of(*servers: ScriptedSshServer, **overrides: Any) -> ClusterConnections:
    # ssh_config=[]: no ~/.ssh/config of whoever runs the tests
    return ClusterConnections([s.host(**overrides) for s in servers], ssh_config=[])


async def until(
    pool: ClusterConnections,
    name: str,
    predicate: Callable[[HostStatus], bool],
    within: float = 10.0,
) -> HostStatus:
    """The first status of ``name`` (current or later) that satisfies ``predicate``."""

    async def watch() -> HostStatus:
        async for status in pool.subscribe():
            if status.name == name and predicate(status):
                return status
        raise AssertionError("pool closed")

    return await asyncio.wait_for(watch(), within)


def state_is(state: HostState) -> Callable[[HostStatus], bool]:
    return lambda s: s.state is state


async def test_connect_up_and_run_real_command(scripted_ssh: Scripted) -> None:
    server = await scripted_ssh()
    async with pool_of(server) as pool:
        statuses = await pool.wait_settled()
        status = statuses["node0"]
        assert status.state is HostState.UP, status
        assert status.latency_ms is not None and status.last_seen is not None
        result = await pool["node0"].run(
            'echo "$GREETING"; cat; echo err >&2; exit 4', input="in\n", env={"GREETING": "a b"}
        )
    assert (result.exit_status, result.stdout, result.stderr) == (4, "a b\nin\n", "err\n")


async def test_scripted_reply_chunks_and_exit_status(scripted_ssh: Scripted) -> None:
    server = await scripted_ssh()
    # Output split mid-line and mid-character (UTF-8 "é" is two bytes).
    server.on(
        "report",
        Reply(stdout=[b"first li", b"ne\ncaf\xc3", b"\xa9\n"], stderr=["bad\n"], exit_status=3),
    )
    async with pool_of(server) as pool:
        await until(pool, "node0", state_is(HostState.UP))
        result = await pool["node0"].run(["report", "--all"])
    assert result.exit_status == 3 and not result.ok
    assert result.stdout == "first line\ncafé\n" and result.stderr == "bad\n"
    assert server.sessions[-1].command == "report --all"


@pytest.mark.parametrize(("name", "expected"), [("KILL", 137), ("TERM", 143), ("SEGV", 139)])
async def test_exit_by_signal_is_128_plus_signal(
    scripted_ssh: Scripted, name: str, expected: int
) -> None:
    """A command that dies of a signal reports 128+N, like a shell and like the local
    transport (asyncssh itself reports exit_status -1 with the exit signal)."""
    server = await scripted_ssh()
    server.on("die", Reply(stdout=["partial\n"], signal=name))
    async with pool_of(server) as pool:
        await until(pool, "node0", state_is(HostState.UP))
        conn = pool["node0"]
        result = await conn.run("die")
        assert (result.exit_status, result.stdout) == (expected, "partial\n")
        # A real process killed by the signal, through bash, reports the same.
        real = await conn.run(f"kill -{name} $$")
        assert real.exit_status == expected
        # A started (long-lived) process reports the same through wait().
        process = await conn.start("die")
        assert [line async for line in process.lines()] == ["partial"]
        assert await process.wait() == expected


async def test_started_process_streams_and_exits(scripted_ssh: Scripted) -> None:
    server = await scripted_ssh()
    server.on("ticker", Stream(interval=0.01, count=5, then="exit"))
    async with pool_of(server) as pool:
        await until(pool, "node0", state_is(HostState.UP))
        process = await pool["node0"].start("ticker")
        lines = [line async for line in process.lines()]
        assert lines == [f"line {i}" for i in range(5)]
        assert await process.wait() == 0


async def test_command_timeout_kills_the_remote_command(scripted_ssh: Scripted) -> None:
    server = await scripted_ssh()
    server.on("forever", Stream(interval=0.05, then="hang"))
    async with pool_of(server) as pool:
        await until(pool, "node0", state_is(HostState.UP))
        started = time.monotonic()
        with pytest.raises(CommandTimeout):
            await pool["node0"].run("forever", timeout=0.3)
        assert time.monotonic() - started < 2.0
        # The console sent the command a KILL (sshd forwards it to the process group).
        for _ in range(50):
            if server.sessions[-1].signals:
                break
            await asyncio.sleep(0.02)
        assert server.sessions[-1].signals == ["KILL"]
        assert pool["node0"].status.state is HostState.UP


async def test_server_gone_is_down_with_reason_then_reconnects_with_backoff(
    scripted_ssh: Scripted,
) -> None:
    server = await scripted_ssh()
    async with pool_of(server) as pool:
        await until(pool, "node0", state_is(HostState.UP))
        assert server.connects == 1
        await server.stop()
        down = await until(pool, "node0", state_is(HostState.DOWN), within=5)
        assert down.reason.startswith("connection lost"), down
        # Retries find nobody listening: the reason says so, the host stays down.
        refused = await until(pool, "node0", lambda s: "refused" in s.reason, within=5)
        assert refused.state is HostState.DOWN and str(server.port) in refused.reason
        with pytest.raises(HostUnavailable):
            await pool["node0"].run("true")
        await asyncio.sleep(0.3)
        await server.start()
        started = time.monotonic()
        up = await until(pool, "node0", state_is(HostState.UP), within=10)
        # Back-off after ~1.5 s of failures is at most 2 s (+25 % jitter) from first 0.5 s.
        assert time.monotonic() - started < 4.0
        assert up.reason == ""
        assert (await pool["node0"].run("echo back")).stdout == "back\n"
        assert server.connects == 2


async def test_backoff_grows_between_attempts(
    scripted_ssh: Scripted, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the port answers TCP but closes at once, each retry waits the product's
    back-off for its attempt number (doubling, +-25 % jitter), not a tight loop. The
    back-off starts at 0.1 s here instead of 0.5 s so that four attempts fit in 1.3 s."""
    delays: list[tuple[int, float]] = []

    def recorded(attempt: int) -> float:
        delay = backoff_delay(attempt, first=0.1)
        delays.append((attempt, delay))
        return delay

    monkeypatch.setattr(ssh, "backoff_delay", recorded)
    server = await scripted_ssh()
    attempts: list[float] = []

    def slam(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        attempts.append(time.monotonic())
        writer.close()

    async with pool_of(server) as pool:
        await until(pool, "node0", state_is(HostState.UP))
        await server.stop()
        slammer = await asyncio.start_server(slam, "127.0.0.1", server.port, reuse_address=True)
        try:
            await asyncio.sleep(1.3)
        finally:
            slammer.close()
            await slammer.wait_closed()
        state = pool["node0"].status
    assert state.state is HostState.DOWN and state.reason
    # One wait after the loss, then one per failed attempt, with a growing attempt number.
    assert len(attempts) >= 4, (attempts, delays)
    assert [a for a, _ in delays[:4]] == [0, 0, 1, 2], delays
    # Every retry really waited its delay (a busy machine only makes gaps longer).
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    for gap, (_, delay) in zip(gaps, delays[1:], strict=False):
        assert gap >= 0.95 * delay, (gaps, delays)


@pytest.mark.usefixtures("fast_reconnect")
async def test_connection_dropped_mid_command_is_host_unavailable(scripted_ssh: Scripted) -> None:
    server = await scripted_ssh()
    server.on("halfway", Reply(stdout=["some output\n"], drop=True))
    async with pool_of(server) as pool:
        await until(pool, "node0", state_is(HostState.UP))
        with pytest.raises(HostUnavailable):
            await asyncio.wait_for(pool["node0"].run("halfway"), 5)
        await until(pool, "node0", state_is(HostState.DOWN), within=5)
        await until(pool, "node0", state_is(HostState.UP), within=5)


async def test_stream_dropped_mid_way_ends_lines_and_wait_is_none(scripted_ssh: Scripted) -> None:
    server = await scripted_ssh()
    server.on("ticker", Stream(interval=0.01, count=3, then="drop"))
    async with pool_of(server) as pool:
        await until(pool, "node0", state_is(HostState.UP))
        process = await pool["node0"].start("ticker")
        lines = await asyncio.wait_for(_collect(process.lines()), 5)
        assert lines == ["line 0", "line 1", "line 2"]
        assert await asyncio.wait_for(process.wait(), 5) is None
        down = await until(pool, "node0", state_is(HostState.DOWN), within=5)
        assert "connection lost" in down.reason


async def _collect(lines: AsyncIterator[str]) -> list[str]:
    return [line async for line in lines]


async def test_refused_channels_are_an_error_not_a_hang(scripted_ssh: Scripted) -> None:
    """Past MaxSessions sshd refuses the channel; the connection itself stays up."""
    server = await scripted_ssh()
    server.max_sessions = 2
    server.on("forever", Stream(interval=0.05, then="hang"))
    async with pool_of(server) as pool:
        await until(pool, "node0", state_is(HostState.UP))
        conn = pool["node0"]
        held = [await conn.start("forever"), await conn.start("forever")]
        with pytest.raises(TransportError, match="MaxSessions") as refused_start:
            await asyncio.wait_for(conn.start("forever"), 5)
        assert not isinstance(refused_start.value, HostUnavailable)
        with pytest.raises(TransportError, match="MaxSessions"):
            await asyncio.wait_for(conn.run("true"), 5)
        outcomes = await asyncio.wait_for(pool.run_all("true"), 5)
        assert isinstance(outcomes["node0"], TransportError)
        # Each refused open is tried again after each pause (sshd frees a session a
        # moment after its channel closed), then given up.
        assert conn.status.state is HostState.UP
        assert server.refused == 3 * (len(OPEN_RETRY_S) + 1)
        # A session ends: the next one gets its channel.
        held.pop().close()
        for _ in range(50):
            if len(server.handlers) < 2:
                break
            await asyncio.sleep(0.02)
        assert (await asyncio.wait_for(conn.run("echo ok"), 5)).stdout == "ok\n"
        for process in held:
            process.close()


async def test_changed_host_key_is_rejected_until_trusted(scripted_ssh: Scripted) -> None:
    server = await scripted_ssh()
    async with pool_of(server) as pool:
        await until(pool, "node0", state_is(HostState.UP))
        await server.stop()
        await server.start(new_host_key=True)  # reinstalled host, or a man in the middle
        rejected = await until(pool, "node0", state_is(HostState.HOST_KEY_REJECTED), within=10)
        assert "host key" in rejected.reason and "ssh-keyscan" in rejected.reason
        connects = server.connects
        # It waits for the user: no retry loop against a host it must not trust (any
        # other failure would have been retried 0.5 s on).
        await asyncio.sleep(0.8)
        assert server.connects == connects
        assert pool["node0"].status.state is HostState.HOST_KEY_REJECTED
        with pytest.raises(HostUnavailable, match="host-key-rejected"):
            await pool["node0"].run("true")
        # The user trusts the new key and presses retry.
        server.known_hosts_path.write_text(server.known_hosts_line())
        pool.reconnect_now("node0")
        await until(pool, "node0", state_is(HostState.UP), within=5)


async def test_unknown_host_key_is_rejected_on_first_connect(scripted_ssh: Scripted) -> None:
    server = await scripted_ssh()
    other = await scripted_ssh("other")
    # known_hosts names another server's key for this address and port.
    server.known_hosts_path.write_text(server.known_hosts_line(other.host_key))
    async with pool_of(server) as pool:
        statuses = await pool.wait_settled(timeout=10)
    assert statuses["node0"].state is HostState.HOST_KEY_REJECTED, statuses
    assert server.sessions == []


async def test_one_host_down_does_not_hold_up_the_others(scripted_ssh: Scripted) -> None:
    up = await scripted_ssh("node0")
    gone = await scripted_ssh("node1")
    await gone.stop()
    async with pool_of(up, gone) as pool:
        statuses = await pool.wait_settled(timeout=10)
        assert statuses["node0"].state is HostState.UP
        assert statuses["node1"].state is HostState.DOWN
        outcomes = await asyncio.wait_for(pool.run_all("echo hi", timeout=5), 5)
    result = outcomes["node0"]
    assert not isinstance(result, Exception) and result.stdout == "hi\n"
    assert isinstance(outcomes["node1"], HostUnavailable)


@pytest.mark.usefixtures("fast_reconnect")
async def test_hung_host_goes_down_by_keepalive_and_commands_do_not_hang(
    scripted_ssh: Scripted,
) -> None:
    """TCP stays up but nothing answers (a hung host, a dead link): keepalives notice,
    a command waiting on the host fails instead of waiting for ever."""
    server = await scripted_ssh()
    async with pool_of(server, keepalive_interval=0.2, connect_timeout=0.5) as pool:
        await until(pool, "node0", state_is(HostState.UP))
        server.freeze()
        started = time.monotonic()
        with pytest.raises(HostUnavailable):
            await asyncio.wait_for(pool["node0"].run("echo hi", timeout=None), 5)
        assert time.monotonic() - started < 3
        down = await until(pool, "node0", state_is(HostState.DOWN), within=5)
        assert "connection lost" in down.reason, down
        # Reconnecting to a host that accepts TCP but never speaks SSH times out.
        silent = await until(pool, "node0", lambda s: "no SSH answer" in s.reason, within=5)
        assert silent.state is HostState.DOWN
        server.thaw()
        await until(pool, "node0", state_is(HostState.UP), within=10)
        assert (await pool["node0"].run("echo hi")).stdout == "hi\n"


async def test_refused_key_is_auth_failed_and_not_retried_in_a_loop(
    scripted_ssh: Scripted, tmp_path: Path
) -> None:
    server = await scripted_ssh()
    stranger = tmp_path / "stranger_key"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(stranger))
    stranger.chmod(0o600)
    async with pool_of(server, identity_file=str(stranger)) as pool:
        status = (await pool.wait_settled(timeout=10))["node0"]
        assert status.state is HostState.AUTH_FAILED, status
        assert "authorized_keys" in status.reason and str(stranger) in status.reason
        connects = server.connects
        await asyncio.sleep(0.8)
        assert server.connects == connects  # retried only after AUTH_RETRY_S
        with pytest.raises(HostUnavailable, match="auth-failed"):
            await pool["node0"].run("true")
