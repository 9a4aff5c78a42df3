"""Where each host goes in the dense GPU view, and what each GPU cell says: plain values.

No textual here: the order (sort, group), the shape that fits a terminal, the cell's
glyphs and the job letters are unit-tested on their own; ``gpu_grid.py`` paints them.

A host is a block ``name ▓▓a▓▓a░░ ··  `` : its name, then one cell per GPU. A cell is
``cell_width - 1`` heat glyphs (utilization or memory, shade AND colour, so it reads
without colour) and one marker: ``!`` needs attention, a letter for the job holding the
GPU, blank otherwise. Several blocks share a line; 256 hosts x 8 GPUs fit 200x50.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from console.inventory import Host
from console.jobs.slurm.queue import SlurmJobOnNode
from console.probe.health import GpuVerdict
from console.probe.models import GpuSample, HostView
from console.ui.attention import Thresholds, gpu_alerts, health_rank
from console.ui.overview import count, gpu_jobs

SORTS = ("name", "util", "memory", "temp", "job")
GROUPS = ("none", "tag", "job")
METRICS = ("util", "memory")
SHADES = "·░▒▓█"  # level 0..4: the glyph says the level without colour
LEVEL_LIMITS = (0.10, 0.35, 0.60, 0.85)  # a fraction below LEVEL_LIMITS[i] is level i
NOT_REPORTED_GLYPH = "?"
ATTENTION_MARK = "!"
HEALTH_FAIL_MARK = "X"  # the GPU's health check fails (a warning is "!")
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
MANY_JOBS_MARK = "*"  # the 53rd job on: the summary line still names it
MAX_NAME = 14
GAP = 1  # spaces after each block
NO_JOB = "(no job)"
NO_TAG = "(no tag)"


def level(fraction: float | None) -> int | None:
    if fraction is None:
        return None
    for index, limit in enumerate(LEVEL_LIMITS):
        if fraction < limit:
            return index
    return len(LEVEL_LIMITS)


def gpu_fraction(gpu: GpuSample, metric: str) -> float | None:
    if metric == "memory":
        return gpu.memory_fraction
    return None if gpu.utilization_gpu is None else gpu.utilization_gpu / 100


@dataclass(frozen=True, slots=True)
class Cell:
    glyph: str  # one of SHADES, or NOT_REPORTED_GLYPH
    level: int | None  # None: not reported
    marker: str  # HEALTH_FAIL_MARK, ATTENTION_MARK, a job letter or " "
    job: str | None  # the job the letter stands for
    alerts: tuple[str, ...]


def cell_of(
    gpu: GpuSample,
    metric: str,
    letters: JobLetters,
    limits: Thresholds,
    slurm: Mapping[int, str] | None = None,
    health: GpuVerdict | None = None,
) -> Cell:
    """``slurm``: GPU index -> the Slurm job holding it (``overview.slurm_gpu_labels``),
    the cell's job when no distconsole job's process is on the GPU; ``health``: the
    GPU's verdict when it is not ok."""
    step = level(gpu_fraction(gpu, metric))
    glyph = NOT_REPORTED_GLYPH if step is None else SHADES[step]
    alerts = tuple(gpu_alerts(gpu, limits, health))
    jobs = gpu_jobs(gpu)
    job = jobs[0] if jobs else (slurm or {}).get(gpu.index)
    if health is not None and health.state == "fail":
        marker = HEALTH_FAIL_MARK
    elif alerts:
        marker = ATTENTION_MARK  # the host detail says which job, and why
    elif job is not None:
        marker = letters.letter(job)
    else:
        marker = " "
    return Cell(glyph, step, marker, job, alerts)


class JobLetters:
    """One letter per job, kept for the console's life: a job's letter never changes
    while the grid repaints, whatever other jobs come and go."""

    def __init__(self) -> None:
        self._letters: dict[str, str] = {}

    def letter(self, job: str) -> str:
        known = self._letters.get(job)
        if known is None:
            count = len(self._letters)
            known = LETTERS[count] if count < len(LETTERS) else MANY_JOBS_MARK
            self._letters[job] = known
        return known

    def labels(self) -> dict[str, str]:
        return dict(self._letters)

    def index(self, job: str) -> int:
        """The job's place in first-seen order (its colour)."""
        return list(self._letters).index(job) if job in self._letters else 0


# -- order ----------------------------------------------------------------------------


def natural_key(name: str) -> tuple[object, ...]:
    """node2 before node10."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def host_job(view: HostView | None, slurm: Sequence[SlurmJobOnNode] = ()) -> str | None:
    """The job holding most of this host's GPUs (None: no job): a distconsole job's
    processes first, else the Slurm job (its label) holding most GPUs there, sampled
    or not."""
    held: Counter[str] = Counter()
    if view is not None and view.sample is not None:
        held.update(job for g in view.sample.gpus for job in gpu_jobs(g))
    if not held:
        held.update({job.label: job.gpus for job in slurm if job.gpus})
    if not held:
        return None
    return min(held, key=lambda job: (-held[job], job))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else -1.0


def _figure(view: HostView | None, sort: str) -> float:
    """The host's figure for a sort: higher first; a host without one last."""
    if view is None or view.sample is None or not view.live:
        return -2.0
    gpus = view.sample.gpus
    if sort == "util":
        return _mean([g.utilization_gpu for g in gpus if g.utilization_gpu is not None])
    if sort == "memory":
        return _mean([f for f in (g.memory_fraction for g in gpus) if f is not None])
    temps = [g.temperature_c for g in gpus if g.temperature_c is not None]
    return max(temps) if temps else -1.0


Slurm = Mapping[str, Sequence[SlurmJobOnNode]]  # Slurm jobs per host (the store's)


def sort_hosts(
    hosts: Sequence[Host], views: Mapping[str, HostView], sort: str, slurm: Slurm | None = None
) -> list[Host]:
    """Hosts in the order of ``sort`` (see SORTS); ties by name, so the order is stable.
    ``slurm``: the job sort's fallback for hosts no distconsole job holds."""
    if sort not in SORTS:
        raise ValueError(f"sort: unknown {sort!r}; choices: {', '.join(SORTS)}")
    by_name = sorted(hosts, key=lambda h: natural_key(h.name))
    if sort == "name":
        return by_name
    if sort == "job":
        # Hosts of one job together, jobs by name, hosts without a job last.
        def job_key(h: Host) -> tuple[bool, str]:
            job = host_job(views.get(h.name), (slurm or {}).get(h.name, ()))
            return (job is None, job or "")

        return sorted(by_name, key=job_key)
    return sorted(by_name, key=lambda h: -_figure(views.get(h.name), sort))


def group_hosts(
    hosts: Sequence[Host], views: Mapping[str, HostView], group: str, slurm: Slurm | None = None
) -> list[tuple[str | None, list[Host]]]:
    """(heading, hosts) in the order given; a host goes under its FIRST tag."""
    if group not in GROUPS:
        raise ValueError(f"group: unknown {group!r}; choices: {', '.join(GROUPS)}")
    if group == "none":
        return [(None, list(hosts))]
    groups: dict[str, list[Host]] = {}
    for host in hosts:
        if group == "tag":
            key = host.tags[0] if host.tags else NO_TAG
        else:
            key = host_job(views.get(host.name), (slurm or {}).get(host.name, ())) or NO_JOB
        groups.setdefault(key, []).append(host)
    last = NO_TAG if group == "tag" else NO_JOB
    ordered = sorted(groups, key=lambda k: (k == last, natural_key(k)))
    return [(key, groups[key]) for key in ordered]


# -- shape ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GridShape:
    name_width: int
    gpus: int  # cells per block: the most GPUs any host has
    cell_width: int  # 3 ("▓▓a") or 2 ("▓a") where 3 would not fit the height
    per_row: int  # blocks on a line

    @property
    def block_width(self) -> int:
        return self.name_width + 1 + self.gpus * self.cell_width + GAP

    @classmethod
    def fit(
        cls, width: int, height: int, name_width: int, gpus: int, hosts: int, headings: int = 0
    ) -> GridShape:
        """Wide cells if every host still fits the height, else narrow ones; never
        fewer than one block a line (the line is cut, and scrolls sideways)."""
        name_width = max(4, min(name_width, MAX_NAME))
        gpus = max(1, gpus)
        narrow = None
        for cell_width in (3, 2):
            block = name_width + 1 + gpus * cell_width + GAP
            per_row = max(1, width // block)
            shape = cls(name_width, gpus, cell_width, per_row)
            lines = -(-hosts // per_row) + headings
            if lines <= height:
                return shape
            narrow = shape
        assert narrow is not None
        # Neither fits: the shape with more hosts per line scrolls least.
        wide = cls(name_width, gpus, 3, max(1, width // (name_width + 1 + gpus * 3 + GAP)))
        return narrow if narrow.per_row > wide.per_row else wide


@dataclass(frozen=True, slots=True)
class GridLines:
    """The grid's lines: a heading (a group's title) or a row of host names."""

    lines: tuple[tuple[str | None, tuple[str, ...]], ...]
    where: Mapping[str, tuple[int, int]]  # host -> (line, block)
    order: tuple[str, ...]  # every shown host, in reading order

    @classmethod
    def build(cls, groups: Sequence[tuple[str | None, Sequence[Host]]], per_row: int) -> GridLines:
        lines: list[tuple[str | None, tuple[str, ...]]] = []
        where: dict[str, tuple[int, int]] = {}
        order: list[str] = []
        for heading, hosts in groups:
            if not hosts:
                continue
            if heading is not None:
                lines.append((f"{heading} ({count(len(hosts), 'host')})", ()))
            names = [h.name for h in hosts]
            for start in range(0, len(names), per_row):
                row = tuple(names[start : start + per_row])
                for column, name in enumerate(row):
                    where[name] = (len(lines), column)
                lines.append((None, row))
                order.extend(row)
        return cls(tuple(lines), where, tuple(order))

    def neighbour(self, host: str | None, dx: int, dy: int) -> str | None:
        """The host left/right (dx) in reading order, or up/down (dy) a host line."""
        if not self.order:
            return None
        if host is None or host not in self.where:
            return self.order[0]
        if dx:
            index = self.order.index(host) + dx
            return self.order[max(0, min(len(self.order) - 1, index))]
        line, column = self.where[host]
        rows = [i for i, (heading, row) in enumerate(self.lines) if row]
        at = rows.index(line) + dy
        if not 0 <= at < len(rows):
            return host
        row = self.lines[rows[at]][1]
        return row[min(column, len(row) - 1)]


def arrange(
    hosts: Sequence[Host],
    views: Mapping[str, HostView],
    *,
    sort: str,
    group: str,
    shown: Callable[[Host], bool],
    slurm: Slurm | None = None,
    health_first: bool = False,
) -> list[tuple[str | None, list[Host]]]:
    """Filter, sort, then group: what the grid shows, in order; ``health_first`` (the
    attention view): hosts with a failing GPU first, then those with a warning one."""
    kept = sort_hosts([h for h in hosts if shown(h)], views, sort, slurm)
    if health_first:
        kept.sort(key=lambda h: -health_rank(views.get(h.name)))
    return group_hosts(kept, views, group, slurm)
