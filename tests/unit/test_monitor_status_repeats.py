"""A connection status announced again unchanged (the transport re-measured latency) is
not a state change for the GPU monitor: a failed sampler keeps its reason and its
back-off. Runs the real sampler through the local transport.

The test also ends the monitor right after a status woke it: with ``asyncio.wait_for``
that cancel was swallowed on Python 3.11 and the monitor slept on (the test hung)."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import replace

from console.inventory import Host
from console.probe.models import HostView
from console.probe.monitor import HostMonitor
from console.transport.local import LocalConnection


async def test_the_same_status_again_keeps_a_failed_samplers_reason() -> None:
    host = Host(name="me", address="local", python=sys.executable, setup="exit 3")
    connection = LocalConnection(host)
    views: list[HostView] = []
    monitor = HostMonitor(connection, interval=0.2, publish=views.append)
    task = asyncio.create_task(monitor.run())
    try:
        for _ in range(100):
            if "status 3" in monitor.view.reason:
                break
            await asyncio.sleep(0.05)
        failed = monitor.view
        assert "sampler exited (status 3)" in failed.reason
        status = connection.status
        monitor.on_status(replace(status, latency_ms=(status.latency_ms or 0) + 5))
        assert monitor.view.reason == failed.reason
        monitor.on_status(replace(status, state=status.state, reason="something else"))
        assert monitor.view.reason == ""  # a real change still goes through
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await connection.close()
