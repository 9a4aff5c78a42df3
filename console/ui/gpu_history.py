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
    """One host's samples, one row each: every GPU slot's figures side by side, NaN
    where that GPU did not report (or was not there) at that time."""

    __slots__ = ("last", "rows", "seen", "times", "width")

    def __init__(self) -> None:
        self.times = array("d")
        self.rows = array("f")
        self.width = 0  # figures per row: GPU slots x len(FIGURES)
        self.seen: set[int] = set()
        self.last: float | None = None

    def widen(self, slots: int) -> None:
        """Room for GPU indexes below ``slots``: each old row padded with NaN."""
        width = slots * len(FIGURES)
        old, self.rows = self.rows, array("f")
        pad = [math.nan] * (width - self.width)
        for row in range(len(self.times)):
            self.rows.extend(old[row * self.width : (row + 1) * self.width])
            self.rows.extend(pad)
        self.width = width


class GpuHistory:
    def __init__(self, samples: int = SAMPLES) -> None:
        self.samples = samples
        self._hosts: dict[str, _HostRing] = {}

    def add(self, views: Mapping[str, HostView]) -> None:
        """Record each host's sample once (a view re-sent with the same sample, or a
        stale one, adds nothing). One row a sample: at 256 hosts a second, appending
        figure by figure to per-GPU rings cost ~5x as much."""
        per_gpu = len(FIGURES)
        for name, view in views.items():
            sample = view.sample
            if sample is None or view.stale:
                continue
            ring = self._hosts.get(name)
            if ring is None:
                ring = self._hosts[name] = _HostRing()
            if ring.last == sample.time:
                continue
            ring.last = sample.time
            gpus = sample.gpus
            slots = max((g.index for g in gpus), default=-1) + 1
            if slots * per_gpu > ring.width:
                ring.widen(slots)
            row = [math.nan] * ring.width
            for gpu in gpus:
                at = gpu.index * per_gpu
                row[at : at + per_gpu] = _figures(gpu)
                ring.seen.add(gpu.index)
            ring.times.append(sample.time)
            ring.rows.extend(row)
            if len(ring.times) > self.samples:
                del ring.times[0]
                del ring.rows[: ring.width]

    def series(self, host: str, figure: str) -> list[Series]:
        """Every GPU of ``host`` for ``figure`` (util %, memory %, temp C), oldest first."""
        if figure not in FIGURES:
            raise ValueError(f"figure: unknown {figure!r}; choices: {', '.join(FIGURES)}")
        ring = self._hosts.get(host)
        if ring is None or not ring.times:
            return []
        newest = ring.times[-1]
        seconds = tuple(t - newest for t in ring.times)
        offset = FIGURES.index(figure)
        out = []
        for gpu in sorted(ring.seen):
            values = ring.rows[gpu * len(FIGURES) + offset :: ring.width]
            out.append(
                Series(gpu, seconds, tuple(None if math.isnan(v) else round(v, 2) for v in values))
            )
        return out

    def hosts(self) -> Iterable[str]:
        return self._hosts.keys()
