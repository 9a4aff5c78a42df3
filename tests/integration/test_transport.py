"""The ssh and local transports and the connection pool, against real OpenSSH sshd."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sshd_cluster import BlackHole, SshdCluster

from console.errors import CommandTimeout, HostUnavailable
from console.inventory import Host
from console.transport import ClusterConnections, HostState, LocalConnection
from console.transport.ssh import BACKOFF_FIRST_S, BACKOFF_MAX_S, backoff_delay

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(60)]

Factory = Callable[..., SshdCluster]


def hosts_of(cluster: SshdCluster, **overrides: Any) -> list[Host]:
    fields: dict[str, Any] = {
        "identity_file": str(cluster.client_key_path),
        "known_hosts": str(cluster.known_hosts_path),
        "connect_timeout": 3.0,
    }
    fields.update(overrides)
    return [
        Host(name=h.name, address=h.address, port=h.port, user=h.user, **fields)
        for h in cluster.hosts
    ]


async def wait_state(pool: ClusterConnections, name: str, state: HostState, within: float) -> float:
    """Seconds until ``name`` reached ``state``, read from the pool's subscription."""
    started = time.monotonic()

    async def watch() -> None:
        async for status in pool.subscribe():
            if status.name == name and status.state is state:
                return

    await asyncio.wait_for(watch(), within)
    return time.monotonic() - started


async def test_all_hosts_up_and_run(sshd_cluster: Factory) -> None:
    cluster = sshd_cluster(n=3)
    async with ClusterConnections(hosts_of(cluster)) as pool:
        statuses = await pool.wait_settled()
        assert {s.state for s in statuses.values()} == {HostState.UP}, statuses
        for status in statuses.values():
            assert status.latency_ms is not None and status.latency_ms > 0
            assert status.last_seen is not None

        node1 = pool["node1"]
        result = await node1.run("echo out; echo err >&2; whoami; exit 3")
        assert result.exit_status == 3 and not result.ok
        assert result.stdout == f"out\n{cluster.hosts[1].user}\n"
        assert result.stderr == "err\n"

        echoed = await node1.run("cat; echo -n end", input="line one\nline two\n")
        assert echoed.stdout == "line one\nline two\nend"
        no_input = await node1.run("cat", timeout=5)  # stdin is closed, cat must not wait
        assert no_input.ok and no_input.stdout == ""

        env = await node1.run('echo "$GREETING|$OTHER"', env={"GREETING": "a b", "OTHER": "$x"})
        assert env.stdout == "a b|$x\n"

        outcomes = await pool.run_all("hostname -I 2>/dev/null; echo $USER", timeout=10)
        for host in cluster.hosts:
            outcome = outcomes[host.name]
            assert not isinstance(outcome, Exception), outcome
            assert outcome.stdout.strip().endswith(host.user)


async def test_aes_gcm_is_agreed_unless_the_ssh_config_names_ciphers(
    sshd_cluster: Factory, tmp_path: Path
) -> None:
    """OpenSSH's sshd agrees to the AES-GCM the console offers first (asyncssh's
    chacha20-poly1305 costs ~6x the CPU per packet); a ``Ciphers`` line in the user's ssh
    config is obeyed instead."""
    cluster = sshd_cluster(n=1)
    plain_config, ciphers_config = tmp_path / "plain", tmp_path / "ciphers"
    plain_config.write_text("Host *\n  ServerAliveInterval 30\n")
    ciphers_config.write_text("Host *\n  Ciphers aes256-ctr\n")
    agreed = {}
    for config in (plain_config, ciphers_config):
        async with ClusterConnections(hosts_of(cluster), ssh_config=[str(config)]) as pool:
            await pool.wait_settled()
            conn = pool["node0"]._conn  # type: ignore[attr-defined]
            assert conn is not None
            agreed[config] = conn.get_extra_info("send_cipher")
    assert agreed == {plain_config: "aes128-gcm@openssh.com", ciphers_config: "aes256-ctr"}


async def test_run_timeout_kills_the_command(sshd_cluster: Factory) -> None:
    cluster = sshd_cluster(n=1)
    marker = f"{time.time() % 1000:.3f}"
    async with ClusterConnections(hosts_of(cluster)) as pool:
        await pool.wait_settled()
        node0 = pool["node0"]
        started = time.monotonic()
        with pytest.raises(CommandTimeout) as caught:
            await node0.run(["sleep", f"3{marker}"], timeout=0.5)
        assert time.monotonic() - started < 2.0
        assert caught.value.host == "node0"
        # The command must not be left running on the host.
        for _ in range(50):
            left = await node0.run(["pgrep", "-f", f"sleep 3{marker}"])
            if left.exit_status == 1:
                break
            await asyncio.sleep(0.05)
        assert left.exit_status == 1, f"still running: {left.stdout}"
        assert (await node0.run("echo still usable")).stdout == "still usable\n"


async def test_start_streams_lines_and_takes_stdin(sshd_cluster: Factory) -> None:
    cluster = sshd_cluster(n=1)
    async with ClusterConnections(hosts_of(cluster)) as pool:
        await pool.wait_settled()
        node0 = pool["node0"]
        ticker = await node0.start(
            "for i in 1 2 3; do echo line$i; echo noise >&2; sleep 0.05; done; exit 4"
        )
        assert [line async for line in ticker.lines()] == ["line1", "line2", "line3"]
        assert await ticker.wait() == 4

        echo = await node0.start("while read -r l; do echo got:$l; done", env={"X": "1"})
        lines = echo.lines()
        await echo.write("hello world\n")
        assert await asyncio.wait_for(anext(lines), 5) == "got:hello world"
        echo.write_eof()
        assert await asyncio.wait_for(echo.wait(), 5) == 0


async def test_stopped_host_goes_down_others_keep_working(sshd_cluster: Factory) -> None:
    cluster = sshd_cluster(n=3)
    async with ClusterConnections(hosts_of(cluster)) as pool:
        await pool.wait_settled()
        cluster.stop("node1")
        await wait_state(pool, "node1", HostState.DOWN, within=3 + 2)
        assert "connection lost" in pool.statuses()["node1"].reason

        started = time.monotonic()
        with pytest.raises(HostUnavailable) as caught:
            await pool["node1"].run("true")
        assert time.monotonic() - started < 0.1  # refused at once, no waiting
        assert caught.value.state == "down"

        outcomes = await pool.run_all("echo alive", timeout=10)
        assert isinstance(outcomes["node1"], HostUnavailable)
        for name in ("node0", "node2"):
            outcome = outcomes[name]
            assert not isinstance(outcome, Exception) and outcome.stdout == "alive\n"
        assert pool.statuses()["node0"].state is HostState.UP

        cluster.start("node1")
        await wait_state(pool, "node1", HostState.UP, within=15)
        assert (await pool["node1"].run("echo back")).stdout == "back\n"


async def test_refused_port_is_down_with_reason(sshd_cluster: Factory) -> None:
    cluster = sshd_cluster(n=2)
    cluster.stop("node1")
    async with ClusterConnections(hosts_of(cluster)) as pool:
        statuses = await pool.wait_settled()
        assert statuses["node0"].state is HostState.UP
        assert statuses["node1"].state is HostState.DOWN
        assert "connection refused" in statuses["node1"].reason


async def test_unknown_or_changed_host_key_is_rejected(sshd_cluster: Factory) -> None:
    cluster = sshd_cluster(n=2)
    # node1's entry carries node0's key: a changed key must be refused like an unknown one.
    node0, node1 = cluster.hosts
    changed = cluster.root / "changed_known_hosts"
    changed.write_text(
        f"[{node1.address}]:{node1.port} {node0.host_public_key}\n{node0.known_hosts_line}\n"
    )
    unknown = hosts_of(cluster, known_hosts=str(cluster.empty_known_hosts))[0]
    wrong = hosts_of(cluster, known_hosts=str(changed))[1]
    async with ClusterConnections([unknown, wrong]) as pool:
        statuses = await pool.wait_settled()
    for status, host in ((statuses["node0"], node0), (statuses["node1"], node1)):
        assert status.state is HostState.HOST_KEY_REJECTED, status
        assert f"ssh-keyscan -p {host.port} {host.address}" in status.reason
        assert "insecure_host_keys: true" in status.reason

    insecure = hosts_of(
        cluster, known_hosts=str(cluster.empty_known_hosts), insecure_host_keys=True
    )
    async with ClusterConnections(insecure) as pool:
        statuses = await pool.wait_settled()
        assert statuses["node0"].state is HostState.UP
        assert (await pool["node0"].run("echo ok")).stdout == "ok\n"


async def test_wrong_client_key_is_auth_failed(sshd_cluster: Factory) -> None:
    cluster = sshd_cluster(n=1)
    hosts = hosts_of(cluster, identity_file=str(cluster.wrong_identity_file))
    async with ClusterConnections(hosts) as pool:
        status = (await pool.wait_settled())["node0"]
        assert status.state is HostState.AUTH_FAILED, status
        assert cluster.hosts[0].user in status.reason
        with pytest.raises(HostUnavailable) as caught:
            await pool["node0"].run("true")
        assert caught.value.state == "auth-failed"


async def test_black_hole_times_out_without_hanging(black_hole: BlackHole) -> None:
    host = Host(name="hole", address=black_hole.address, port=black_hole.port, connect_timeout=1)
    started = time.monotonic()
    async with ClusterConnections([host]) as pool:
        status = (await pool.wait_settled(timeout=10))["hole"]
    elapsed = time.monotonic() - started
    assert status.state is HostState.DOWN, status
    assert "within 1s" in status.reason
    assert elapsed < 1 + 2


async def test_local_transport(tmp_path: Path) -> None:
    local = Host(name="here", address="local")
    async with ClusterConnections([local]) as pool:
        statuses = await pool.wait_settled()
        assert statuses["here"].state is HostState.UP
        conn = pool["here"]
        assert isinstance(conn, LocalConnection)
        result = await conn.run("echo out; echo err >&2; exit 5", env={"V": "x y"})
        assert (result.exit_status, result.stdout, result.stderr) == (5, "out\n", "err\n")
        assert (await conn.run('echo "$V"', env={"V": "x y"})).stdout == "x y\n"
        assert (await conn.run("cat", input="abc")).stdout == "abc"
        with pytest.raises(CommandTimeout):
            await conn.run("sleep 20", timeout=0.3)
        process = await conn.start("for i in 1 2; do echo n$i; done")
        assert [line async for line in process.lines()] == ["n1", "n2"]
        assert await process.wait() == 0
        outcomes = await pool.run_all("echo hi")
        assert not isinstance(outcomes["here"], Exception)


async def test_quoted_argument_arrives_literally(sshd_cluster: Factory) -> None:
    cluster = sshd_cluster(n=1)
    victim = Path(f"/tmp/distconsole-quote-{uuid.uuid4().hex}")
    nasty = f"'; touch {victim} #"
    async with ClusterConnections(hosts_of(cluster)) as pool:
        await pool.wait_settled()
        result = await pool["node0"].run(["printf", "%s", nasty], env={"N": nasty})
        assert result.stdout == nasty
        echoed = await pool["node0"].run('printf %s "$N"', env={"N": nasty})
        assert echoed.stdout == nasty
    assert not victim.exists()


async def test_ssh_config_alias_and_proxy_jump(sshd_cluster: Factory) -> None:
    cluster = sshd_cluster(n=2)
    node0, node1 = cluster.hosts
    config = cluster.root / "ssh_config"
    common = (
        f"  IdentityFile {cluster.client_key_path}\n"
        f"  UserKnownHostsFile {cluster.known_hosts_path}\n"
    )
    config.write_text(
        f"Host jump\n  HostName {node0.address}\n  Port {node0.port}\n  User {node0.user}\n"
        + common
        + f"Host target\n  HostName {node1.address}\n  Port {node1.port}\n  User {node1.user}\n"
        + common
        + "  ProxyJump jump\n"
    )
    # Only the alias: address, port, user, key, known_hosts and the jump come from the config.
    target = Host(name="target", address="target", connect_timeout=3)
    async with ClusterConnections([target], ssh_config=[str(config)]) as pool:
        status = (await pool.wait_settled())["target"]
        assert status.state is HostState.UP, status
        assert (await pool["target"].run("whoami")).stdout == f"{node1.user}\n"
        # The traffic runs through the jump host: losing it loses the target.
        cluster.stop("node0")
        await wait_state(pool, "target", HostState.DOWN, within=5)


async def test_hung_host_is_detected_by_keepalive(sshd_cluster: Factory) -> None:
    cluster = sshd_cluster(n=2)
    async with ClusterConnections(hosts_of(cluster, keepalive_interval=0.3)) as pool:
        await pool.wait_settled()
        cluster.freeze("node0")  # no FIN, no RST: the peer just stops answering
        try:
            await wait_state(pool, "node0", HostState.DOWN, within=0.3 * 4 + 3)
            assert pool.statuses()["node1"].state is HostState.UP
        finally:
            cluster.thaw("node0")
        await wait_state(pool, "node0", HostState.UP, within=15)


async def test_hanging_host_does_not_hold_up_the_others(
    sshd_cluster: Factory, black_hole: BlackHole
) -> None:
    cluster = sshd_cluster(n=1)
    hole = Host(name="hole", address=black_hole.address, port=black_hole.port, connect_timeout=2)
    async with ClusterConnections([*hosts_of(cluster), hole], max_parallel=2) as pool:
        await wait_state(pool, "node0", HostState.UP, within=2)
        assert pool.statuses()["hole"].state is HostState.CONNECTING
        with pytest.raises(HostUnavailable):
            await pool["hole"].run("true")  # still connecting: refused at once
        outcomes = await pool.run_all("echo hi", timeout=5)
        assert isinstance(outcomes["hole"], HostUnavailable)
        assert not isinstance(outcomes["node0"], Exception)
        settled = await pool.wait_settled()
        assert settled["hole"].state is HostState.DOWN


def test_backoff_doubles_with_jitter_up_to_the_cap() -> None:
    for attempt in range(12):
        base = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2**attempt)
        delays = {backoff_delay(attempt) for _ in range(50)}
        assert all(0.75 * base <= d <= 1.25 * base for d in delays)
        assert len(delays) > 1  # jittered, so hosts lost together do not retry in lockstep
