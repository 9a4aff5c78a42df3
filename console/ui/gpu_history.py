"""Each GPU's recent utilization, memory and temperature, for the host detail's plots.

Kept in the store (one per app), appended once per new sample of a host. Figures are
packed in ``array('f')`` rings (NaN: not reported), not lists of floats: 256 hosts x 8
GPUs x 3 figures x 120 samples is ~3 MB this way, ~25 MB as Python floats.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from console.probe.models import GpuSample, HostView

SAMPLES = 120  # per GPU: two minutes at the default 1 s interval
FIGURES = ("util", "memory", "temp")


def _figures(gpu: GpuSample) -> tuple[float, float, float]:
    fraction = gpu.memory_fraction
    return (
        math.nan if gpu.utilization_gpu is None else gpu.utilization_gpu,
        math.nan if fraction is None else 100 * fraction,
        math.nan if gpu.temperature_c is None else gpu.temperature_c,
    )


@dataclass(frozen=True, slots=True)
class Series:
    """One GPU's history of one figure: seconds relative to the newest sample, values
    (None where the GPU did not report it)."""

    gpu: int
    seconds: tuple[float, ...]
    values: tuple[float | None, ...]


class _HostRing:
    __slots__ = ("figures", "last", "times")

    def __init__(self) -> None:
        self.times = array("d")
        self.figures: dict[tuple[int, str], array[float]] = {}
        self.last: float | None = None


class GpuHistory:
    def __init__(self, samples: int = SAMPLES) -> None:
        self.samples = samples
        self._hosts: dict[str, _HostRing] = {}

    def add(self, views: Mapping[str, HostView]) -> None:
        """Record each host's sample once (a view re-sent with the same sample, or a
        stale one, adds nothing)."""
        for name, view in views.items():
            sample = view.sample
            if sample is None or view.stale:
                continue
            ring = self._hosts.setdefault(name, _HostRing())
            if ring.last == sample.time:
                continue
            ring.last = sample.time
            self._append(ring.times, sample.time)
            at = len(ring.times)
            for gpu in sample.gpus:
                for figure, value in zip(FIGURES, _figures(gpu), strict=True):
                    series = ring.figures.get((gpu.index, figure))
                    if series is None:
                        # A GPU seen late: NaN back to the host's first sample.
                        series = ring.figures[(gpu.index, figure)] = array("f")
                    series.extend([math.nan] * (at - 1 - len(series)))
                    self._append(series, value)

    def _append(self, ring: array[float], value: float) -> None:
        ring.append(value)
        if len(ring) > self.samples:
            del ring[0]

    def series(self, host: str, figure: str) -> list[Series]:
        """Every GPU of ``host`` for ``figure`` (util %, memory %, temp C), oldest first."""
        if figure not in FIGURES:
            raise ValueError(f"figure: unknown {figure!r}; choices: {', '.join(FIGURES)}")
        ring = self._hosts.get(host)
        if ring is None or not ring.times:
            return []
        newest = ring.times[-1]
        out = []
        for (gpu, name), values in sorted(ring.figures.items()):
            if name != figure:
                continue
            times = ring.times[-len(values) :] if values else ring.times[:0]
            out.append(
                Series(
                    gpu,
                    tuple(t - newest for t in times),
                    tuple(None if math.isnan(v) else round(v, 2) for v in values),
                )
            )
        return out

    def hosts(self) -> Iterable[str]:
        return self._hosts.keys()
