"""Which GPUs and hosts need a look: the "attention" view of the cluster screen."""

from __future__ import annotations

from dataclasses import dataclass

from console.probe.models import GpuSample, HostView
from console.settings import DEFAULT_SETTINGS, Settings


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The ``attention_*`` settings, read once per screen instead of per GPU."""

    hot_c: float
    memory_full: float  # fraction of the board's memory in use
    idle_percent: float  # utilization below this while one of our ranks holds the GPU

    @classmethod
    def of(cls, settings: Settings) -> Thresholds:
        return cls(
            settings.attention_hot_c,
            settings.attention_memory_full,
            settings.attention_idle_percent,
        )


DEFAULT_THRESHOLDS = Thresholds.of(DEFAULT_SETTINGS)


def gpu_alerts(gpu: GpuSample, limits: Thresholds = DEFAULT_THRESHOLDS) -> list[str]:
    """Why this GPU needs attention ("hot", "memory full", "idle under a job"); empty if fine."""
    alerts: list[str] = []
    if gpu.temperature_c is not None and gpu.temperature_c >= limits.hot_c:
        alerts.append("hot")
    fraction = gpu.memory_fraction
    if fraction is not None and fraction >= limits.memory_full:
        alerts.append("memory full")
    ours = any(p.job for p in gpu.processes)
    if ours and gpu.utilization_gpu is not None and gpu.utilization_gpu < limits.idle_percent:
        alerts.append("idle under a job")
    return alerts


def host_needs_attention(view: HostView, limits: Thresholds = DEFAULT_THRESHOLDS) -> bool:
    if not view.live:
        return True
    sample = view.sample
    return sample is not None and any(gpu_alerts(g, limits) for g in sample.gpus)
