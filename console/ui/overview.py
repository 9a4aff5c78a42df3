"""The cluster summary line of the GPU screen, as plain values (no textual, no rich).

Per-host figures are computed once per new view of that host (:meth:`HostTotals.of`);
the cluster's line adds up the hosts' totals (:meth:`ClusterSummary.of`), so a batch
that changed 3 hosts of 256 does not walk 2048 GPUs again. Busy, idle and hot use the
attention thresholds of ``settings.py`` (``attention_idle_percent``, ``attention_hot_c``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from console.jobs.slurm.queue import SlurmJobOnNode
from console.probe.models import GpuSample, HostView
from console.transport.base import HostState, HostStatus
from console.ui.attention import DEFAULT_THRESHOLDS, Thresholds, gpu_alerts

MAX_JOBS_SHOWN = 4  # the line's end is cut at 80 columns: the biggest jobs only


def count(n: int, noun: str) -> str:
    """``1 host``, ``2 hosts``: a count with its noun agreeing."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def gpu_jobs(gpu: GpuSample) -> list[str]:
    """The distconsole jobs holding this GPU (usually one), in a stable order."""
    return sorted({p.job for p in gpu.processes if p.job})


def slurm_gpu_labels(jobs: Sequence[SlurmJobOnNode]) -> Mapping[int, str]:
    """GPU index -> the label of the Slurm job holding it (where Slurm says which)."""
    return {index: job.label for job in jobs for index in job.gpu_indices}


def slurm_held(jobs: Sequence[SlurmJobOnNode]) -> tuple[tuple[str, int], ...]:
    """(label, GPUs) of the Slurm jobs holding GPUs on one host."""
    return tuple((job.label, job.gpus) for job in jobs if job.gpus)


@dataclass(frozen=True, slots=True)
class HostTotals:
    """One host's share of the summary line."""

    live: bool = False
    down: bool = False  # a view says the host is not up, or its sample is stale
    gpus: int = 0
    busy: int = 0  # utilization at or above the idle threshold
    idle: int = 0
    hot: int = 0
    attention: int = 0
    util_sum: float = 0.0
    util_count: int = 0
    memory_used_mib: float = 0.0
    memory_total_mib: float = 0.0
    power_w: float = 0.0
    power_limit_w: float = 0.0
    jobs: tuple[tuple[str, int], ...] = ()  # (job, GPUs it holds here)
    simulated: bool = False

    @classmethod
    def of(cls, view: HostView, limits: Thresholds = DEFAULT_THRESHOLDS) -> HostTotals:
        sample = view.sample
        simulated = sample is not None and sample.simulated
        if not view.live or sample is None:
            return cls(live=False, down=not view.live, simulated=simulated)
        gpus = sample.gpus
        utils = [g.utilization_gpu for g in gpus if g.utilization_gpu is not None]
        held: Counter[str] = Counter(job for g in gpus for job in gpu_jobs(g))
        return cls(
            live=True,
            gpus=len(gpus),
            busy=sum(1 for u in utils if u >= limits.idle_percent),
            idle=sum(1 for u in utils if u < limits.idle_percent),
            hot=sum(
                1 for g in gpus if g.temperature_c is not None and g.temperature_c >= limits.hot_c
            ),
            attention=sum(1 for g in gpus if gpu_alerts(g, limits)),
            util_sum=sum(utils),
            util_count=len(utils),
            # Used and total from the same boards only: a board without a total would
            # otherwise read as more than full.
            memory_used_mib=sum(
                g.memory_used_mib or 0.0 for g in gpus if g.memory_total_mib is not None
            ),
            memory_total_mib=sum(g.memory_total_mib or 0.0 for g in gpus),
            power_w=sum(g.power_draw_w or 0.0 for g in gpus),
            power_limit_w=sum(g.power_limit_w or 0.0 for g in gpus),
            jobs=tuple(sorted(held.items())),
            simulated=simulated,
        )

    @classmethod
    def of_status(cls, status: HostStatus) -> HostTotals:
        """A host with no view yet: down when its connection says so (auth failed,
        host key rejected, refused), waiting while it connects."""
        return cls(down=not status.is_up and status.state is not HostState.CONNECTING)


@dataclass(frozen=True, slots=True)
class ClusterSummary:
    hosts: int
    up: int = 0
    down: int = 0
    gpus: int = 0
    busy: int = 0
    idle: int = 0
    hot: int = 0
    attention: int = 0
    util_avg: float | None = None
    memory_used_mib: float = 0.0
    memory_total_mib: float = 0.0
    power_w: float = 0.0
    power_limit_w: float = 0.0
    jobs: tuple[tuple[str, int], ...] = ()  # (job, GPUs held), most GPUs first
    simulated: bool = False

    @property
    def waiting(self) -> int:
        """Hosts neither live nor known down: connecting, or no sample yet."""
        return max(0, self.hosts - self.up - self.down)

    @classmethod
    def of(
        cls,
        hosts: int,
        totals: Iterable[HostTotals],
        slurm: Iterable[Sequence[SlurmJobOnNode]] = (),
    ) -> ClusterSummary:
        """``slurm``: each host's Slurm jobs (their GPUs count whether or not the host
        is sampled: Slurm, not a sample, says who holds them)."""
        every = list(totals)
        utils = sum(t.util_count for t in every)
        jobs: Counter[str] = Counter()
        for t in every:
            jobs.update(dict(t.jobs))
        held: Counter[str] = Counter()
        for on_host in slurm:
            held.update(dict(slurm_held(on_host)))
        # A job the console launched through Slurm has its processes' label too: its
        # allocation (Slurm's count) already holds the GPUs its processes are seen on.
        for label, gpus in held.items():
            jobs[label] = max(jobs[label], gpus)
        return cls(
            hosts=hosts,
            up=sum(t.live for t in every),
            down=sum(t.down for t in every),
            gpus=sum(t.gpus for t in every),
            busy=sum(t.busy for t in every),
            idle=sum(t.idle for t in every),
            hot=sum(t.hot for t in every),
            attention=sum(t.attention for t in every),
            util_avg=sum(t.util_sum for t in every) / utils if utils else None,
            memory_used_mib=sum(t.memory_used_mib for t in every),
            memory_total_mib=sum(t.memory_total_mib for t in every),
            power_w=sum(t.power_w for t in every),
            power_limit_w=sum(t.power_limit_w for t in every),
            jobs=tuple(sorted(jobs.items(), key=lambda item: (-item[1], item[0]))),
            simulated=any(t.simulated for t in every),
        )


def _tib_or_gib(mib: float) -> tuple[float, str]:
    return (mib / 1024 / 1024, "TiB") if mib >= 1024 * 1024 else (mib / 1024, "GiB")


def _power(watts: float) -> str:
    return f"{watts / 1000:.1f} kW" if watts >= 10_000 else f"{watts:.0f} W"


def summary_parts(
    summary: ClusterSummary,
    *,
    attention_only: bool = False,
    query: str = "",
    jobs: bool = True,
) -> list[str]:
    """The summary line's parts, most important first: at 80 columns its end is cut.

    ``jobs=False`` leaves the GPUs per job out (the dense view lists them, with the
    letters its cells carry, under the grid)."""
    parts = []
    if attention_only:
        parts.append("ATTENTION VIEW (a: all)")
    if query:
        parts.append(f"filter: {query!r}")
    hosts = count(summary.hosts, "host")
    states = [f"{summary.up} up"] if summary.up != summary.hosts else []
    if summary.down:
        states.append(f"{summary.down} down")
    if summary.waiting:
        states.append(f"{summary.waiting} waiting")
    parts.append(hosts + (f" ({', '.join(states)})" if states else ""))
    gpus = count(summary.gpus, "GPU")
    if summary.gpus:
        gpus += f": {summary.busy} busy, {summary.idle} idle"
        if summary.hot:
            gpus += f", {summary.hot} hot"
    parts.append(gpus)
    if summary.util_avg is not None:
        parts.append(f"util avg {summary.util_avg:.0f}%")
    if summary.memory_total_mib:
        total, unit = _tib_or_gib(summary.memory_total_mib)
        used = summary.memory_used_mib / summary.memory_total_mib * total
        share = 100 * summary.memory_used_mib / summary.memory_total_mib
        parts.append(f"memory {used:.1f}/{total:.1f} {unit} ({share:.0f}%)")
    if summary.power_w:
        limit = f"/{_power(summary.power_limit_w)}" if summary.power_limit_w else ""
        parts.append(f"power {_power(summary.power_w)}{limit}")
    if summary.attention:
        need = "needs" if summary.attention == 1 else "need"
        parts.append(f"{count(summary.attention, 'GPU')} {need} attention")
    if summary.jobs and jobs:
        shown = [f"{job} {count(held, 'GPU')}" for job, held in summary.jobs[:MAX_JOBS_SHOWN]]
        more = len(summary.jobs) - MAX_JOBS_SHOWN
        parts.append("jobs: " + ", ".join(shown) + (f", +{more} more" if more > 0 else ""))
    if summary.simulated:
        parts.append("simulated GPUs")
    return parts


def summary_text(
    summary: ClusterSummary,
    *,
    attention_only: bool = False,
    query: str = "",
    jobs: bool = True,
) -> str:
    parts = summary_parts(summary, attention_only=attention_only, query=query, jobs=jobs)
    return "  ·  ".join(parts)
