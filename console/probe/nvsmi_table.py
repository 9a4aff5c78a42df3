"""Parser for the default ``nvidia-smi`` table (what people paste, and the last resort
when only the plain command is available).

The table truncates long names ("NVIDIA GeForce RTX 4080 ...") and process paths and
has no UUIDs; what it shows is read as shown. Both the 80-column (<= R525) and the
90-column layouts parse; the MIG devices section is skipped.
"""

from __future__ import annotations

import re
from dataclasses import replace

from console.probe import values
from console.probe.models import GpuProcess, GpuSample

_ROW1 = re.compile(r"^\s*(\d+)\s+(.*?)\s+(On|Off|WDDM|TCC|MCDM|N/A)\s*$")
_ROW2 = re.compile(r"^\s*(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*/\s*(\S+)\s*$")
_MEMORY = re.compile(r"^\s*(\S+)\s*/\s*(\S+)\s*$")
_PROCESS = re.compile(
    r"^\|\s*(\d+)\s+(?:(\S+)\s+(\S+)\s+)?(\d+)\s+(C\+G|M\+C|C|G|M)\s+(.*?)\s+(\S+)\s*\|\s*$"
)


def _cells(line: str) -> list[str]:
    return line.strip().strip("|").split("|")


def _gpu(rows: list[list[str]]) -> GpuSample | None:
    if len(rows) < 2 or len(rows[0]) < 3 or len(rows[1]) < 3:
        return None
    first = _ROW1.match(rows[0][0])
    if not first:
        return None
    second = _ROW2.match(rows[1][0])
    memory = _MEMORY.match(rows[1][1])
    util_and_mode = rows[1][2].split(None, 1)
    mig = rows[2][2].strip() if len(rows) > 2 and len(rows[2]) > 2 else None
    return GpuSample(
        index=int(first.group(1)),
        name=values.text(first.group(2)),
        fan_percent=values.number(second.group(1)) if second else None,
        temperature_c=values.number(second.group(2)) if second else None,
        pstate=values.text(second.group(3)) if second else None,
        power_draw_w=values.number(second.group(4)) if second else None,
        power_limit_w=values.number(second.group(5)) if second else None,
        memory_used_mib=values.number(memory.group(1)) if memory else None,
        memory_total_mib=values.number(memory.group(2)) if memory else None,
        utilization_gpu=values.number(util_and_mode[0]) if util_and_mode else None,
        ecc_uncorrected=values.integer(rows[0][2]),
        mig_mode=values.text(mig),
    )


def _gpu_section(lines: list[str]) -> list[GpuSample]:
    start = next((i for i, ln in enumerate(lines) if ln.startswith("|===")), None)
    if start is None:
        return []
    gpus: list[GpuSample] = []
    block: list[list[str]] = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        if line.startswith("+") or line.startswith("|-"):
            gpu = _gpu(block)
            if gpu is not None:
                gpus.append(gpu)
            block = []
        elif line.startswith("|"):
            block.append(_cells(line))
    gpu = _gpu(block)
    if gpu is not None:
        gpus.append(gpu)
    return gpus


def _processes(lines: list[str]) -> list[tuple[int, GpuProcess]]:
    start = next((i for i, ln in enumerate(lines) if "Processes:" in ln), None)
    if start is None:
        return []
    out: list[tuple[int, GpuProcess]] = []
    body = lines[start:]
    sep = next((i for i, ln in enumerate(body) if ln.startswith("|===")), None)
    for line in body[(sep or 0) + 1 :]:
        m = _PROCESS.match(line)
        if not m:
            continue
        proc = GpuProcess(
            pid=int(m.group(4)),
            type=m.group(5),
            command=values.text(m.group(6)),
            used_memory_mib=values.number(m.group(7)),
        )
        out.append((int(m.group(1)), proc))
    return out


def parse_table(output: str) -> tuple[GpuSample, ...]:
    """GPUs (with their processes) from the default nvidia-smi table."""
    lines = output.splitlines()
    gpus = _gpu_section(lines)
    procs = _processes(lines)
    return tuple(replace(g, processes=tuple(p for idx, p in procs if idx == g.index)) for g in gpus)
