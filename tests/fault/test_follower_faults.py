"""The log follower against a SCRIPTED in-process SSH server (tests/scripted_ssh.py).

The server runs the product's real follow program with the local bash and python and cuts
the connection after a given number of stdout bytes (wherever that falls: mid-frame,
mid-line), so resuming from the last delivered offset is tested without knowing the wire
format: every line arrives once, in order, across the drops."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from scripted_ssh import Reply, RunLocally, ScriptedSshServer

from console.errors import TransportError
from console.jobs.models import LogFile
from console.logs.follower import FollowTarget, HostLogFollower, follow_hosts
from console.logs.models import LogBatch, rank_key
from console.logs.prefixes import context_for
from console.transport import ClusterConnections, HostState

pytestmark = pytest.mark.timeout(30)

Scripted = Callable[..., Awaitable[ScriptedSshServer]]
JOB = "faults-20260101-000000-abcdef"
RANKS = (0, 1)
BEFORE = 800  # lines per rank already written when following starts
AFTER = 800  # lines per rank appended while following


def line(rank: int, i: int) -> str:
    return f"rank {rank} line {i:05d} " + "x" * (i % 53)


def job_dir(server: ScriptedSshServer) -> Path:
    path = server.home / "jobs" / JOB
    path.mkdir(parents=True, exist_ok=True)
    return path


def target_of(server: ScriptedSshServer, name: str = "node0") -> FollowTarget:
    d = job_dir(server)
    files = tuple(
        context_for(JOB, name, LogFile(str(d / f"rank-{r}.out"), "stdout", "rank", r, r), None)
        for r in RANKS
    )
    return FollowTarget(JOB, name, files=files, dirs=(str(d),), done_markers=(str(d / "done"),))


def write_lines(server: ScriptedSshServer, start: int, stop: int) -> None:
    d = job_dir(server)
    for r in RANKS:
        with (d / f"rank-{r}.out").open("a") as out:
            out.writelines(line(r, i) + "\n" for i in range(start, stop))


async def writer(server: ScriptedSshServer) -> None:
    """Append AFTER lines per rank in small steps, then mark the writers done."""
    step = 100
    for start in range(BEFORE, BEFORE + AFTER, step):
        write_lines(server, start, start + step)
        await asyncio.sleep(0.02)
    (job_dir(server) / "done").write_text("0\n")


@pytest.mark.usefixtures("fast_reconnect")
async def test_resume_after_mid_stream_drops_loses_and_repeats_nothing(
    scripted_ssh: Scripted,
) -> None:
    server = await scripted_ssh()
    write_lines(server, 0, BEFORE)
    # The first two follower connections are cut after this many stdout bytes: with
    # reads of at most 4 KiB (max_line) that is after a few whole frames, inside the next.
    server.on(None, RunLocally(drop_after_bytes=10_000), times=1)
    server.on(None, RunLocally(drop_after_bytes=23_311), times=1)
    seen: dict[object, list[str]] = defaultdict(list)
    kinds: list[str] = []
    per_session = [0]  # lines delivered by each follower run
    async with ClusterConnections([server.host()], ssh_config=[]) as pool:
        await pool.wait_settled(timeout=10)
        follower = HostLogFollower(
            pool["node0"], target_of(server), retry_first_s=0.1, max_line=4096
        )
        writing = asyncio.create_task(writer(server))
        batches = follower.batches()
        try:
            async with asyncio.timeout(20):
                async for batch in batches:
                    for log_line in batch.lines:
                        seen[rank_key(log_line)].append(log_line.text)
                    per_session[-1] += len(batch.lines)
                    kinds.extend(n.kind for n in batch.notes)
                    if any(n.kind == "disconnected" for n in batch.notes):
                        per_session.append(0)
                    if batch.finished:
                        break
        finally:
            await batches.aclose()
            writing.cancel()
        assert pool["node0"].status.state is HostState.UP
    for r in RANKS:
        expected = [line(r, i) for i in range(BEFORE + AFTER)]
        got = seen[r]
        assert len(got) == len(expected) and got == expected, (r, len(got))
    assert set(seen) == set(RANKS)
    assert kinds.count("disconnected") == 2 and kinds.count("resumed") == 2, kinds
    outcomes = [s.outcome for s in server.sessions]
    assert outcomes[:2] == ["dropped", "dropped"] and len(outcomes) == 3, outcomes
    assert follower.finished and follower.restarts == 2
    # Each cut run had delivered lines, so the next one resumed mid-file.
    assert len(per_session) == 3 and all(per_session), per_session


@pytest.mark.usefixtures("fast_reconnect")
async def test_drop_while_idle_then_new_lines_arrive_once(scripted_ssh: Scripted) -> None:
    """The connection goes while nothing is being written (the follower only heartbeats);
    lines written during the outage arrive once after the reconnect."""
    server = await scripted_ssh()
    write_lines(server, 0, 10)
    texts: list[str] = []
    kinds: list[str] = []
    async with ClusterConnections([server.host()], ssh_config=[]) as pool:
        await pool.wait_settled(timeout=10)
        follower = HostLogFollower(pool["node0"], target_of(server), retry_first_s=0.1)
        batches = follower.batches()
        try:
            async with asyncio.timeout(20):
                async for batch in batches:
                    texts.extend(log_line.text for log_line in batch.lines)
                    kinds.extend(n.kind for n in batch.notes)
                    if len(texts) == 2 * 10 and "disconnected" not in kinds:
                        await server.stop()  # the host vanishes
                        write_lines(server, 10, 20)  # the job keeps writing meanwhile
                        await asyncio.sleep(0.3)
                        await server.start()
                    if "resumed" in kinds and len(texts) >= 2 * 20:
                        (job_dir(server) / "done").write_text("0\n")
                    if batch.finished:
                        break
        finally:
            await batches.aclose()
    for r in RANKS:
        assert [t for t in texts if t.startswith(f"rank {r} ")] == [line(r, i) for i in range(20)]
    assert "disconnected" in kinds and "resumed" in kinds
    assert len(texts) == 40


async def test_refused_channel_ends_that_host_with_an_error_others_go_on(
    scripted_ssh: Scripted,
) -> None:
    refusing = await scripted_ssh("node0")
    working = await scripted_ssh("node1")
    refusing.max_sessions = 0  # as past sshd's MaxSessions
    for server in (refusing, working):
        write_lines(server, 0, 5)
        (job_dir(server) / "done").write_text("0\n")
    hosts = [refusing.host("node0"), working.host("node1")]
    batches: list[LogBatch] = []
    async with ClusterConnections(hosts, ssh_config=[]) as pool:
        await pool.wait_settled(timeout=10)
        followers = [
            HostLogFollower(pool["node0"], target_of(refusing, "node0")),
            HostLogFollower(pool["node1"], target_of(working, "node1")),
        ]
        async with asyncio.timeout(15):
            batches = [b async for b in follow_hosts(followers)]
    errors = [n for b in batches for n in b.notes if n.kind == "error"]
    assert [n.host for n in errors] == ["node0"] and "MaxSessions" in errors[0].message
    node1_lines = [ln.text for b in batches if b.host == "node1" for ln in b.lines]
    assert sorted(node1_lines) == sorted(line(r, i) for r in RANKS for i in range(5))
    assert any(b.finished for b in batches if b.host == "node1")


async def test_follower_start_refused_raises_transport_error_promptly(
    scripted_ssh: Scripted,
) -> None:
    server = await scripted_ssh()
    server.max_sessions = 0
    async with ClusterConnections([server.host()], ssh_config=[]) as pool:
        await pool.wait_settled(timeout=10)
        follower = HostLogFollower(pool["node0"], target_of(server))
        with pytest.raises(TransportError, match="MaxSessions"):
            async with asyncio.timeout(5):
                async for _ in follower.batches():
                    pass


@pytest.mark.parametrize(
    "delay",
    [
        pytest.param(
            0.3,
            id="exit-after-program-sent",
        ),
        pytest.param(
            0.0,
            id="exit-with-exec-reply",
        ),
    ],
)
async def test_follower_that_cannot_start_says_why(scripted_ssh: Scripted, delay: float) -> None:
    server = await scripted_ssh()
    server.on(
        None, Reply(stderr=["bash: python3: command not found\n"], exit_status=127, delay=delay)
    )
    async with ClusterConnections([server.host()], ssh_config=[]) as pool:
        await pool.wait_settled(timeout=10)
        follower = HostLogFollower(pool["node0"], target_of(server))
        async with asyncio.timeout(10):
            batches = [b async for b in follow_hosts([follower])]
    errors = [n.message for b in batches for n in b.notes if n.kind == "error"]
    assert len(errors) == 1 and "127" in errors[0] and "command not found" in errors[0], errors


async def test_follower_killed_mid_stream_is_an_error_not_a_hang(scripted_ssh: Scripted) -> None:
    """The follower process dies of a signal while the connection stays (someone's
    pkill, the OOM killer): that host's following ends with an error that says so
    (no restart: a non-zero exit is not retried); what was delivered is a clean prefix."""
    server = await scripted_ssh()
    write_lines(server, 0, BEFORE)
    server.on(None, RunLocally(signal_after_lines=(1000, "KILL")))
    async with ClusterConnections([server.host()], ssh_config=[]) as pool:
        await pool.wait_settled(timeout=10)
        follower = HostLogFollower(pool["node0"], target_of(server))
        async with asyncio.timeout(10):
            batches = [b async for b in follow_hosts([follower])]
        assert pool["node0"].status.state is HostState.UP
    errors = [n.message for b in batches for n in b.notes if n.kind == "error"]
    assert len(errors) == 1 and "status 137" in errors[0], errors
    seen: dict[object, list[str]] = defaultdict(list)
    for b in batches:
        for log_line in b.lines:
            seen[rank_key(log_line)].append(log_line.text)
    assert sum(map(len, seen.values())) > 0
    for r in RANKS:
        assert seen[r] == [line(r, i) for i in range(len(seen[r]))]
    assert server.sessions[0].outcome == "signal KILL" and len(server.sessions) == 1
