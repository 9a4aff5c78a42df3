"""The GPU panel's slow-rank marks (issue 32): which of a host's GPUs and which host
carry a rank the job's leader scored slow, from the jobs store's rows."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rich.text import Text

from console.jobs.report.slow_ranks import SlowRank
from console.probe.models import GpuSample
from console.ui.widgets.gpu_text import one_line


@dataclass(frozen=True, slots=True)
class HostSlow:
    """One slow rank on a host: its job, rank, pace and cause."""

    job: str
    rank: int
    relative: float
    cause: str


def slow_by_host(jobs: Iterable[tuple[str, Iterable[SlowRank]]]) -> dict[str, tuple[HostSlow, ...]]:
    """``(job id, its slow ranks)`` pairs as each host's marks."""
    out: dict[str, list[HostSlow]] = {}
    for job, ranks in jobs:
        for s in ranks:
            out.setdefault(s.host, []).append(HostSlow(job, s.rank, s.relative, s.cause))
    return {host: tuple(marks) for host, marks in out.items()}


def slow_line(marks: tuple[HostSlow, ...], style: str) -> Text:
    """ "⚠ slow: rank 2 of job-x, 1.8x the median: CPU: cgroup quota ..." (one line)."""
    said = "; ".join(
        f"rank {m.rank} of {m.job}, {m.relative:.1f}x the median: {m.cause}" for m in marks
    )
    return Text("⚠ slow: " + one_line(said), style=style, no_wrap=True, overflow="ellipsis")


def gpu_slow_ranks(gpu: GpuSample, marks: tuple[HostSlow, ...]) -> list[int]:
    """The slow ranks whose process runs on ``gpu`` (the sampler names each process's job
    and rank from its environment)."""
    slow = {(m.job, m.rank) for m in marks}
    return sorted({p.rank for p in gpu.processes if p.rank is not None and (p.job, p.rank) in slow})


def marked_gpu_line(line: Text, ranks: list[int], style: str) -> Text:
    """A GPU line with "◀ SLOW rank 2" after it (a copy: GPU lines are kept and shared)."""
    marked = line.copy()
    label = ", ".join(str(r) for r in ranks)
    marked.append(f"  ◀ SLOW rank{'s' if len(ranks) > 1 else ''} {label}", style=style)
    return marked
