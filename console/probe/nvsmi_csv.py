"""Parser for ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`` and
``--query-compute-apps=...``.

Works with or without the header line (give ``fields`` for ``noheader``) and with or
without units; any field list in any order, so the wide 200-field captures and the
sampler's short list parse alike. The sampler sends these raw rows to the console,
so this one parser is what reads live GPUs too.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from console.hostprogs.sampler.schema import GPU_FIELDS, QUERY_APPS, query_gpu
from console.probe import values
from console.probe.models import GpuProcess, GpuSample

# The fields the sampler asks for, in this order (also the stand-in's contract).
QUERY_GPU_FIELDS: tuple[str, ...] = query_gpu()
QUERY_APPS_FIELDS: tuple[str, ...] = QUERY_APPS

_UNIT_SUFFIX = re.compile(r"\s*\[[^\]]*\]\s*$")

# Other names of a field in wide captures and other driver versions; first match wins.
_ALIASES: dict[str, tuple[str, ...]] = {
    "uuid": ("gpu_uuid",),
    "name": ("gpu_name",),
    "power_draw_w": ("power.draw.instant", "power.draw.average"),
    "power_limit_w": ("enforced.power.limit",),
    "clock_sm_mhz": ("clocks.sm",),
    "clock_mem_mhz": ("clocks.mem",),
}
# GpuSample attribute -> (its type in the sample schema, nvidia-smi names to read it from).
_GPU_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    attr: (kind, (query, *_ALIASES.get(attr, ()))) for attr, kind, query in GPU_FIELDS
}
_FREE_TEXT_FIELDS = ("process_name", "name", "gpu_name")


@dataclass(frozen=True, slots=True)
class AppRow:
    """One --query-compute-apps row: a process and the GPU (by uuid/bus id) it uses."""

    gpu_uuid: str | None
    gpu_bus_id: str | None
    process: GpuProcess


def field_name(header_cell: str) -> str:
    """``"memory.used [MiB]"`` -> ``"memory.used"``."""
    return _UNIT_SUFFIX.sub("", header_cell.strip())


def _rows(lines: Iterable[str], fields: Sequence[str] | None) -> tuple[list[str], list[list[str]]]:
    reader = csv.reader((ln for ln in lines if ln.strip()), skipinitialspace=True)
    rows = [[c.strip() for c in r] for r in reader]
    if fields is None:
        if not rows:
            return [], []
        fields = [field_name(c) for c in rows[0]]
        rows = rows[1:]
    names = list(fields)
    fixed: list[list[str]] = []
    for row in rows:
        if len(row) > len(names):
            # nvidia-smi does not quote: a command line with commas spills into extra cells.
            free = next((names.index(f) for f in _FREE_TEXT_FIELDS if f in names), None)
            if free is not None:
                extra = len(row) - len(names)
                row = [
                    *row[:free],
                    ", ".join(row[free : free + extra + 1]),
                    *row[free + extra + 1 :],
                ]
        fixed.append(row)
    return names, fixed


def _gpu_from_row(names: list[str], row: list[str], position: int) -> GpuSample:
    cells = dict(zip(names, row, strict=False))
    kwargs: dict[str, object] = {}
    for attr, (kind, aliases) in _GPU_FIELDS.items():
        raw = next((cells[a] for a in aliases if a in cells and values.text(cells[a])), None)
        if attr == "index":
            idx = values.integer(raw)
            kwargs["index"] = position if idx is None else idx
        elif kind == "str":
            kwargs[attr] = values.text(raw)
        elif kind == "int":
            kwargs[attr] = values.integer(raw)
        else:
            kwargs[attr] = values.number(raw)
    return GpuSample(**kwargs)  # type: ignore[arg-type]


def parse_query_gpu(
    lines: str | Iterable[str], fields: Sequence[str] | None = None
) -> tuple[GpuSample, ...]:
    """GPUs from ``--query-gpu`` output; ``fields`` when the output has no header."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    names, rows = _rows(lines, fields)
    return tuple(_gpu_from_row(names, row, i) for i, row in enumerate(rows))


def parse_compute_apps(
    lines: str | Iterable[str], fields: Sequence[str] | None = None
) -> tuple[AppRow, ...]:
    """Processes from ``--query-compute-apps`` output."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    names, rows = _rows(lines, fields)
    out: list[AppRow] = []
    for row in rows:
        cells = dict(zip(names, row, strict=False))
        pid = values.integer(cells.get("pid"))
        if pid is None:
            continue
        proc = GpuProcess(
            pid=pid,
            command=values.text(cells.get("process_name")),
            used_memory_mib=values.number(cells.get("used_gpu_memory", cells.get("used_memory"))),
        )
        out.append(
            AppRow(values.text(cells.get("gpu_uuid")), values.text(cells.get("gpu_bus_id")), proc)
        )
    return tuple(out)


def attach_processes(gpus: Sequence[GpuSample], apps: Iterable[AppRow]) -> tuple[GpuSample, ...]:
    """Each GPU with the processes whose gpu_uuid is its uuid (a lone GPU takes all)."""
    by_uuid: dict[str | None, list[GpuProcess]] = {}
    for app in apps:
        by_uuid.setdefault(app.gpu_uuid, []).append(app.process)
    out = []
    for gpu in gpus:
        procs = by_uuid.get(gpu.uuid, [])
        if len(gpus) == 1 and not procs and gpu.uuid is None:
            procs = [p for ps in by_uuid.values() for p in ps]
        out.append(replace(gpu, processes=tuple(procs)) if procs else gpu)
    return tuple(out)
