"""Stall detection: a rank silent for much longer than its own recent step interval.

Pure: it reads :class:`RankSteps` snapshots, the time now and, where the monitor knows
it, each rank's GPU utilisation. A rank whose GPU is busy is computing (a long eval, a
checkpoint), not stalled; a rank whose GPU state is unknown is judged on silence alone.
This flags a hung collective within seconds to minutes, long before NCCL's own
10-minute timeout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from console.logs.models import RankKey
from console.logs.steps import RankSteps

DEFAULT_FACTOR = 5.0
DEFAULT_MIN_SILENCE_S = 5.0
DEFAULT_IDLE_BELOW = 10.0  # GPU utilisation percent under which the GPU counts as idle


@dataclass(frozen=True, slots=True)
class StallConfig:
    factor: float = DEFAULT_FACTOR
    min_silence_s: float = DEFAULT_MIN_SILENCE_S
    idle_below: float = DEFAULT_IDLE_BELOW

    def __post_init__(self) -> None:
        if self.factor <= 1.0:
            raise ValueError(f"stall factor must be > 1, got {self.factor}")
        if self.min_silence_s <= 0:
            raise ValueError(f"stall min_silence_s must be > 0, got {self.min_silence_s}")


@dataclass(frozen=True, slots=True)
class Stall:
    key: RankKey
    host: str
    silent_s: float
    step_interval_s: float
    threshold_s: float
    gpu_util: float | None  # None: the monitor does not know this rank's GPU

    def describe(self) -> str:
        gpu = "GPU unknown" if self.gpu_util is None else f"GPU {self.gpu_util:.0f}%"
        return (
            f"stalled: silent {self.silent_s:.0f}s, usually a step every "
            f"{self.step_interval_s:.1f}s ({gpu})"
        )


def find_stalls(
    ranks: Sequence[RankSteps],
    now: float,
    gpu_util: Mapping[RankKey, float] | None = None,
    config: StallConfig | None = None,
) -> list[Stall]:
    """Ranks that look stalled now. Ranks with fewer than two step reports have no
    interval of their own yet and are never flagged."""
    cfg = config or StallConfig()
    util = gpu_util or {}
    stalls: list[Stall] = []
    for r in ranks:
        if r.step_interval_s is None or r.last_step_at is None:
            continue
        threshold = max(cfg.min_silence_s, cfg.factor * r.step_interval_s)
        # Silence is measured from the last step report: a rank repeating a warning
        # while stuck in a collective still makes no progress.
        silent = now - r.last_step_at
        if silent <= threshold:
            continue
        busy = util.get(r.key)
        if busy is not None and busy >= cfg.idle_below:
            continue
        stalls.append(Stall(r.key, r.host, silent, r.step_interval_s, threshold, busy))
    return stalls
