"""Which GPUs and hosts need a look: the "attention" view of the cluster screen.

A GPU's health verdict (``console/probe/health.py``: fail / warn, with reasons) is one of
its alerts; hosts with a failing GPU come first in the attention view (:func:`health_rank`).
"""

from __future__ import annotations

from dataclasses import dataclass

from console.probe.health import RANK, GpuVerdict, host_verdicts
from console.probe.models import GpuSample, HostSample, HostView
from console.settings import DEFAULT_SETTINGS, Settings

Health = dict[int | None, GpuVerdict]  # a host's verdicts that are not ok, by GPU (None: host)
# host -> its latest view's verdicts (one entry per host: no old sample is kept alive)
_HEALTH_CACHE: dict[str, tuple[HostSample, HostView, Health]] = {}


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


def health_of(view: HostView | None) -> Health:
    """The host's GPU verdicts that are not ok (none for a sample without a health
    reading: simulated GPUs, the nvidia-smi loop). Kept per sample: panels, cells and
    the attention view ask for it per GPU and per batch."""
    sample = view.sample if view is not None else None
    if view is None or sample is None or sample.health is None or not view.up:
        return {}
    kept = _HEALTH_CACHE.get(view.name)
    if kept is not None and kept[0] is sample and kept[1] is view:
        return kept[2]
    found = {v.gpu: v for v in host_verdicts(view) if v.state != "ok"}
    _HEALTH_CACHE[view.name] = (sample, view, found)
    return found


def health_rank(view: HostView | None) -> int:
    """2: a GPU (or the host) fails, 1: warns, 0: neither."""
    return max((RANK[v.state] for v in health_of(view).values()), default=0)


def health_alert(verdict: GpuVerdict | None) -> list[str]:
    """A verdict as one alert: "FAIL row remap pending (reset the GPU) +1"."""
    if verdict is None or verdict.state == "ok":
        return []
    more = f" +{len(verdict.reasons) - 1}" if len(verdict.reasons) > 1 else ""
    first = verdict.reasons[0] if verdict.reasons else verdict.state
    return [f"{'FAIL' if verdict.state == 'fail' else 'warn'} {first}{more}"]


def gpu_alerts(
    gpu: GpuSample, limits: Thresholds = DEFAULT_THRESHOLDS, health: GpuVerdict | None = None
) -> list[str]:
    """Why this GPU needs attention (its health verdict, "hot", "memory full", "idle under
    a job"); empty if fine."""
    alerts: list[str] = health_alert(health)
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
    if sample is None:
        return False
    return bool(health_of(view)) or any(gpu_alerts(g, limits) for g in sample.gpus)
