"""Every GPU's verdict on some hosts, from one fresh sample of each over connections the
caller already holds (pre-flight's health gate; ``distconsole health`` opens its own)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Protocol

from console.probe.health import GpuVerdict, cluster_verdicts
from console.probe.host_monitor import HostMonitor
from console.probe.models import HostView
from console.transport.base import HostConnection

HEALTH_READ_TIMEOUT_S = 20.0  # a one-shot sampler gives up on a GPU reader after 5 s


class Connections(Protocol):
    """The pool's connections by host name (``ClusterConnections``)."""

    def __getitem__(self, name: str) -> HostConnection: ...


async def read_views(
    connections: Connections,
    names: Sequence[str],
    timeout: float = HEALTH_READ_TIMEOUT_S,
) -> list[HostView]:
    """One sample of each host in ``names`` (all at once), as views; a host that gives
    none within ``timeout`` keeps the view it had (no sample)."""

    def ignore(_view: HostView) -> None:
        return None

    monitors = [
        HostMonitor(connections[name], interval=1.0, publish=ignore, once=True) for name in names
    ]
    tasks = [asyncio.create_task(m.run(), name=f"health:{m.host.name}") for m in monitors]
    try:
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
    finally:
        for monitor, task in zip(monitors, tasks, strict=True):
            monitor.stop()
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    return [m.view for m in monitors]


async def read_verdicts(
    connections: Connections,
    names: Sequence[str],
    timeout: float = HEALTH_READ_TIMEOUT_S,
) -> list[GpuVerdict]:
    """Every GPU's verdict on ``names`` from one fresh sample each; a host that gives
    none within ``timeout`` is a host-level ``fail`` ("no sample")."""
    return cluster_verdicts(await read_views(connections, names, timeout))
