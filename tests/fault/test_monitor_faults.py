"""The cluster monitor against a SCRIPTED in-process SSH server (tests/scripted_ssh.py).

The server runs the product's real sampler command with the local bash and python
(simulated GPUs), and injects the faults: the stream cut mid-way (connection aborted, or
the sampler killed while the connection stays), a garbage line in the stream, a channel
refused, a sampler that fails at once. Nothing here knows the sampler's wire format."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest
from scripted_ssh import Reply, RunLocally, ScriptedSshServer

from console.probe.models import HostView
from console.probe.monitor import ClusterMonitor
from console.transport import ClusterConnections, HostState
from console.transport.ship import STDIN_SOURCE

pytestmark = pytest.mark.timeout(30)

Scripted = Callable[..., Awaitable[ScriptedSshServer]]
INTERVAL = 0.1


async def views_until(
    monitor: ClusterMonitor,
    predicate: Callable[[HostView], bool],
    within: float = 10.0,
    name: str = "node0",
) -> HostView:
    """The first view of ``name`` (now or later) for which ``predicate`` holds."""

    async def watch() -> HostView:
        async for batch in monitor.updates():
            view = batch.get(name)
            if view is not None and predicate(view):
                return view
        raise AssertionError("monitor ended")

    return await asyncio.wait_for(watch(), within)


def fresh_after(moment: float) -> Callable[[HostView], bool]:
    """An up, non-stale view whose sample was taken after ``moment``."""
    return lambda v: (
        v.state is HostState.UP and not v.stale and v.sample is not None and v.sample.time > moment
    )


def live(view: HostView) -> bool:
    return view.state is HostState.UP and not view.stale and view.sample is not None


@pytest.mark.usefixtures("fast_reconnect")
@pytest.mark.parametrize("extra", [0, 40], ids=["at-line-end", "mid-line"])
async def test_stream_cut_by_dropped_connection_restarts_sampler(
    scripted_ssh: Scripted, extra: int
) -> None:
    server = await scripted_ssh()
    # The first sampler's connection is aborted after its 4th line (and ``extra`` bytes
    # of the 5th); later ones run on.
    server.on(None, RunLocally(drop_after_lines=4, drop_extra_bytes=extra), times=1)
    async with (
        ClusterConnections([server.host()], ssh_config=[]) as pool,
        ClusterMonitor(pool, interval=INTERVAL) as monitor,
    ):
        await views_until(monitor, live)
        stale = await views_until(monitor, lambda v: v.stale or v.state is not HostState.UP)
        assert stale.sample is not None  # the last sample is kept, marked stale
        cut = time.time()
        view = await views_until(monitor, fresh_after(cut))
        assert view.reason == ""
        # Samples keep coming from the new sampler.
        await views_until(monitor, fresh_after(view.sample.time if view.sample else cut))
    assert [s.outcome for s in server.sessions[:1]] == ["dropped"]
    assert len(server.sessions) == 2 and server.connects == 2


async def test_sampler_killed_mid_stream_is_restarted_on_same_connection(
    scripted_ssh: Scripted,
) -> None:
    server = await scripted_ssh()
    server.on(None, RunLocally(signal_after_lines=(4, "KILL")), times=1)
    async with (
        ClusterConnections([server.host()], ssh_config=[]) as pool,
        ClusterMonitor(pool, interval=INTERVAL) as monitor,
    ):
        await views_until(monitor, live)
        await views_until(monitor, lambda v: v.stale)
        cut = time.time()
        await views_until(monitor, fresh_after(cut))
        assert pool["node0"].status.state is HostState.UP
    assert server.sessions[0].outcome == "signal KILL"
    assert len(server.sessions) == 2 and server.connects == 1


async def test_garbage_line_does_not_stop_the_monitor(scripted_ssh: Scripted) -> None:
    server = await scripted_ssh()
    garbage = b"\xff\xfe not a sample {\x00\n"
    server.on(None, RunLocally(insert_after_lines={3: garbage, 5: b"[1, 2]\n"}))
    async with (
        ClusterConnections([server.host()], ssh_config=[]) as pool,
        ClusterMonitor(pool, interval=INTERVAL) as monitor,
    ):
        first = await views_until(monitor, live)
        assert first.sample is not None
        # Well past both bad lines, samples still arrive from the same sampler.
        seen: list[float] = []

        def counts(view: HostView) -> bool:
            if live(view) and view.sample is not None and view.sample.time not in seen:
                seen.append(view.sample.time)
            return len(seen) >= 8

        await views_until(monitor, counts)
        assert monitor.views()["node0"].reason == ""
    assert len(server.sessions) == 1 and server.connects == 1


async def test_refused_channel_is_a_reason_not_a_hang(scripted_ssh: Scripted) -> None:
    server = await scripted_ssh()
    server.max_sessions = 0  # every channel refused, as past sshd's MaxSessions
    async with (
        ClusterConnections([server.host()], ssh_config=[]) as pool,
        ClusterMonitor(pool, interval=INTERVAL) as monitor,
    ):
        started = time.monotonic()
        views = await monitor.first_frame(timeout=10)
        assert time.monotonic() - started < 5
        view = views["node0"]
        assert view.state is HostState.UP and view.sample is None
        assert "MaxSessions" in view.reason, view
        # The channel becomes available again: the sampler starts (retry backs off 1 s).
        server.max_sessions = None
        await views_until(monitor, live)
    assert server.refused >= 1


@pytest.mark.parametrize(
    "delay",
    [
        pytest.param(0.3, id="exit-after-program-sent"),
        pytest.param(
            0.0,
            id="exit-with-exec-reply",
        ),
    ],
)
async def test_sampler_failing_at_once_is_reported(scripted_ssh: Scripted, delay: float) -> None:
    """A sampler that fails before reading its program (the host's setup line fails):
    the reason names the exit status and stderr. On a link with some latency the exit
    and channel close arrive together with the exec reply (``delay=0``)."""
    server = await scripted_ssh()
    server.on(
        None, Reply(stderr=["setup.sh: No such file or directory\n"], exit_status=1, delay=delay)
    )
    async with (
        ClusterConnections([server.host()], ssh_config=[]) as pool,
        ClusterMonitor(pool, interval=INTERVAL) as monitor,
    ):
        views = await monitor.first_frame(timeout=10)
    view = views["node0"]
    assert view.state is HostState.UP and view.sample is None
    assert "status 1" in view.reason and "No such file" in view.reason, view


@pytest.mark.parametrize(
    "delay",
    [
        pytest.param(0.3, id="exit-after-program-sent"),
        pytest.param(
            0.0,
            id="exit-with-exec-reply",
        ),
    ],
)
async def test_no_python_falls_back_to_nvidia_smi_loop(
    scripted_ssh: Scripted, delay: float
) -> None:
    server = await scripted_ssh()
    missing = Reply(stderr=["bash: python3: command not found\n"], exit_status=127, delay=delay)
    server.on(STDIN_SOURCE, missing)  # the sampler: the interpreter reading its program on stdin
    server.on("nvidia-smi", Reply(stderr=["nvidia-smi: not found\n"], exit_status=127))
    async with (
        ClusterConnections([server.host()], ssh_config=[]) as pool,
        ClusterMonitor(pool, interval=INTERVAL) as monitor,
    ):
        await monitor.first_frame(timeout=10)
    assert any("nvidia-smi" in s.command for s in server.sessions), server.sessions


@pytest.mark.usefixtures("fast_reconnect")
async def test_hung_host_goes_stale_while_the_others_keep_updating(
    scripted_ssh: Scripted,
) -> None:
    healthy = await scripted_ssh("node0")
    hung = await scripted_ssh("node1")
    hosts = [s.host(keepalive_interval=0.2, connect_timeout=1.0) for s in (healthy, hung)]
    async with (
        ClusterConnections(hosts, ssh_config=[]) as pool,
        ClusterMonitor(pool, interval=INTERVAL) as monitor,
    ):
        for name in ("node0", "node1"):
            await views_until(monitor, live, name=name)
        hung.freeze()
        frozen_at = time.time()
        view = await views_until(monitor, lambda v: v.stale, name="node1", within=5)
        assert view.sample is not None and view.sample.time <= frozen_at + 0.5
        # node0 kept updating all along.
        await views_until(monitor, fresh_after(time.time()), name="node0", within=2)
        assert monitor.views()["node1"].stale
        hung.thaw()
        await views_until(monitor, fresh_after(time.time()), name="node1", within=10)
