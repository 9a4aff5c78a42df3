"""Every GPU's verdict on some hosts, from one fresh sample of each over connections the
caller already holds (pre-flight's health gate; ``distconsole health`` opens its own),
and which GPUs other processes already use, as the sampler sees them (the GPU screen's
view: NVML or nvidia-smi, and the demo's simulated GPUs, which nvidia-smi never lists)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from console.probe.health import GpuVerdict, cluster_verdicts
from console.probe.host_monitor import HostMonitor
from console.probe.models import GpuProcess, HostView
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


@dataclass(frozen=True, slots=True)
class BusyGpu:
    """A GPU with processes on it, a row beside the verdicts (pre-flight warns of it);
    ``reasons`` names each process."""

    host: str
    gpu: int
    state: Literal["busy"] = "busy"
    reasons: tuple[str, ...] = ()


def busy_gpus(views: Sequence[HostView]) -> list[BusyGpu]:
    rows = []
    for view in views:
        if view.sample is None or view.stale:
            continue
        for gpu in view.sample.gpus:
            if gpu.processes:
                rows.append(BusyGpu(view.name, gpu.index, reasons=_named(gpu.processes)))
    return rows


def _named(processes: Sequence[GpuProcess]) -> tuple[str, ...]:
    named = []
    for p in processes:
        what = (p.command or "").split(" ", 1)[0].rsplit("/", 1)[-1] or "?"
        owner = (
            [f"job {p.job}" + (f" rank {p.rank}" if p.rank is not None else "")] if p.job else []
        )
        if p.user:
            owner.append(p.user)
        if p.used_memory_mib is not None:
            owner.append(f"{p.used_memory_mib:.0f} MiB")
        named.append(f"pid {p.pid} {what}" + (f" ({', '.join(owner)})" if owner else ""))
    return tuple(named)


async def read_verdicts(
    connections: Connections,
    names: Sequence[str],
    timeout: float = HEALTH_READ_TIMEOUT_S,
) -> list[GpuVerdict | BusyGpu]:
    """Every GPU's verdict on ``names`` from one fresh sample each, then a
    :class:`BusyGpu` row for each GPU with processes on it; a host that gives none
    within ``timeout`` is a host-level ``fail`` ("no sample")."""
    views = await read_views(connections, names, timeout)
    return [*cluster_verdicts(views), *busy_gpus(views)]
