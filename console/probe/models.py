"""What a sampler reports: plain frozen dataclasses the UI and the CLI read.

A figure a driver (or a host) does not report is ``None``: never 0, which would read
as "idle" or "cold" on a panel. ``to_json`` helpers give the documented JSON shape
of ``distconsole gpus --json``. The GPU, process and host figures are those of
``console/hostprogs/sampler/schema.py`` (a contract test keeps the two in step).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from console.hostprogs.sampler.schema import GPU_FIELDS, GPU_PROCESSES, names
from console.probe.health_models import HostHealth
from console.transport.base import HostState


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    command: str | None = None  # full command line when the host let us read it
    user: str | None = None
    used_memory_mib: float | None = None
    type: str | None = None  # "C", "G", "C+G" where the driver says
    job: str | None = None  # DISTCONSOLE_JOB_ID of the process or an ancestor
    rank: int | None = None
    local_rank: int | None = None


@dataclass(frozen=True, slots=True)
class GpuSample:
    index: int
    uuid: str | None = None
    name: str | None = None
    utilization_gpu: float | None = None
    utilization_memory: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    temperature_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    fan_percent: float | None = None
    pstate: str | None = None
    clock_sm_mhz: float | None = None
    clock_mem_mhz: float | None = None
    ecc_corrected: int | None = None  # volatile totals, where the board has ECC
    ecc_uncorrected: int | None = None
    mig_mode: str | None = None  # "Enabled" / "Disabled"; None when the board has no MIG
    processes: tuple[GpuProcess, ...] = ()

    @property
    def memory_fraction(self) -> float | None:
        if self.memory_used_mib is None or not self.memory_total_mib:
            return None
        return self.memory_used_mib / self.memory_total_mib


@dataclass(frozen=True, slots=True)
class HostSample:
    """One interval's reading of one host."""

    name: str
    time: float  # epoch seconds on the console when the line arrived
    gpu_source: str  # "nvml", "nvidia-smi", "nvidia-smi-loop", "simulated", "none"
    gpus: tuple[GpuSample, ...] = ()
    gpu_error: str | None = None  # why there are no GPUs ("no NVIDIA GPU: ...")
    simulated: bool = False
    cpu_percent: float | None = None
    cpu_count: int | None = None
    load_1m: float | None = None
    load_5m: float | None = None
    load_15m: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    net_rx_bytes_s: float | None = None
    net_tx_bytes_s: float | None = None
    disk_read_bytes_s: float | None = None
    disk_write_bytes_s: float | None = None
    host_source: str | None = None  # "psutil" or "proc"
    health: HostHealth | None = None  # the GPUs' health, Xid events (console/probe/health.py)


@dataclass(frozen=True, slots=True)
class HostView:
    """What a panel shows for one host: its connection state and its latest sample.

    When the host goes down the last sample stays, marked ``stale``, with
    ``last_seen`` saying when it last answered.
    """

    name: str
    state: HostState
    reason: str = ""
    sample: HostSample | None = None
    stale: bool = False
    last_seen: float | None = None

    @property
    def up(self) -> bool:
        return self.state is HostState.UP

    @property
    def live(self) -> bool:
        """Up and its sample current: what a panel shows undimmed and summaries count."""
        return self.up and not self.stale


def process_to_json(p: GpuProcess) -> dict[str, Any]:
    return {f.name: getattr(p, f.name) for f in fields(GpuProcess)}


def gpu_to_json(g: GpuSample) -> dict[str, Any]:
    out: dict[str, Any] = {name: getattr(g, name) for name in names(GPU_FIELDS)}
    out[GPU_PROCESSES] = [process_to_json(p) for p in g.processes]
    return out


def host_view_to_json(view: HostView) -> dict[str, Any]:
    s = view.sample
    return {
        "name": view.name,
        "state": str(view.state),
        "reason": view.reason,
        "stale": view.stale,
        "last_seen": view.last_seen,
        "sampled_at": s.time if s else None,
        "gpu_source": s.gpu_source if s else None,
        "gpu_error": s.gpu_error if s else None,
        "simulated": s.simulated if s else False,
        "cpu_percent": s.cpu_percent if s else None,
        "cpu_count": s.cpu_count if s else None,
        "load_1m": s.load_1m if s else None,
        "memory_used_mib": s.memory_used_mib if s else None,
        "memory_total_mib": s.memory_total_mib if s else None,
        "net_rx_bytes_s": s.net_rx_bytes_s if s else None,
        "net_tx_bytes_s": s.net_tx_bytes_s if s else None,
        "disk_read_bytes_s": s.disk_read_bytes_s if s else None,
        "disk_write_bytes_s": s.disk_write_bytes_s if s else None,
        "gpus": [gpu_to_json(g) for g in s.gpus] if s else [],
    }
