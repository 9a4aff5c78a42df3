"""What a rank's GPU shows that would slow it: clocks throttled (which reason), a PCIe
link trained below its maximum, another job's or user's process on it.

Pure functions over nvidia-smi's CSV (``--query-gpu``/``--query-compute-apps``, with or
without the header line; the sampler's parsing rules: ``cell_text`` for the "not
reported" placeholders), so a captured answer is replayed in a test as it came. The
reading itself (running nvidia-smi, bounded) is :mod:`causes`'s.

A host program part: standard library and console.hostprogs only, Python 3.7+.
"""

from __future__ import annotations

import csv
import re

if False:  # for type checkers only, without importing typing on the host
    from collections.abc import Callable

if __name__ != "__main__":  # imported by the console/tests; on a host the source precedes
    from console.hostprogs.sampler.health_rules import cell_text

# What rank_cause asks nvidia-smi for (a driver that refuses one is asked again without
# it; before R535 the mask is ``clocks_throttle_reasons.active``: health.OLDER_NAMES).
CAUSE_QUERY_GPU = (
    "index",
    "uuid",
    "pci.bus_id",
    "utilization.gpu",
    "clocks_event_reasons.active",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.gen.hostmax",
    "pcie.link.width.current",
    "pcie.link.width.max",
)
CAUSE_QUERY_APPS = ("gpu_uuid", "gpu_bus_id", "pid")

# NVML's clocks event reasons that slow a busy GPU, in the order they are named, and the
# per-reason column of each (either prefix: clocks_event_reasons since R535, before that
# clocks_throttle_reasons). Idle, application clocks, sync boost and display clocks
# are left out: they are settings or a GPU at rest, not a fault.
CAUSE_THROTTLE_REASONS = (
    (0x40, "hw_thermal_slowdown", "thermal slowdown"),
    (0x20, "sw_thermal_slowdown", "software thermal slowdown"),
    (0x08, "hw_slowdown", "hardware slowdown"),
    (0x80, "hw_power_brake_slowdown", "power brake"),
    (0x04, "sw_power_cap", "power cap"),
)
_CAUSE_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.")
_CAUSE_UNIT = re.compile(r"\s*\[[^\]]*\]\s*$")  # " [MiB]" after a header name
# A PCIe generation below its maximum counts only on a busy GPU: idle links downshift
# (every idle board in tests/data/nvidia-smi's XML captures sits at gen 1).
CAUSE_LOADED_PERCENT = 50.0


def cause_csv_rows(
    text: str, fields: tuple[str, ...] | list[str] | None = None
) -> list[dict[str, str]]:
    """nvidia-smi CSV as one dict per row, keyed by field name (units dropped): with
    ``fields`` the text has no header; without, its first line is the header."""
    rows = [r for r in csv.reader(text.splitlines(), skipinitialspace=True) if r]
    if fields is None:
        if not rows:
            return []
        fields = [_CAUSE_UNIT.sub("", cell).strip() for cell in rows[0]]
        rows = rows[1:]
    cells = [[c.strip() for c in row] for row in rows if len(row) == len(fields)]
    return [dict(zip(fields, row)) for row in cells]  # noqa: B905 (hosts may run Python < 3.10)


def cause_number(value: str | None) -> float | None:
    """The figure of a cell ("16", "100 %", "0x40"); None where not reported or odd."""
    text = cell_text(value)
    if text is None:
        return None
    try:
        return float(int(text, 16)) if text.lower().startswith("0x") else float(text.split()[0])
    except (ValueError, IndexError):
        return None


def _cause_field(row: dict[str, str], name: str) -> str | None:
    for prefix in _CAUSE_PREFIXES:
        if prefix + name in row:
            return row[prefix + name]
    return None


def cause_throttle_reasons(row: dict[str, str]) -> list[str] | None:
    """The slowing clocks reasons of one GPU row in words ([] none); None when the row
    tells nothing (no mask, no reason column: the driver did not say)."""
    mask = cause_number(_cause_field(row, "active"))
    out = []
    told = mask is not None
    for bit, name, words in CAUSE_THROTTLE_REASONS:
        column = cell_text(_cause_field(row, name))
        if column is not None:
            told = True
            if column.lower() == "active":
                out.append(words)
        elif mask is not None and int(mask) & bit:
            out.append(words)
    return out if told else None


def cause_pcie_words(row: dict[str, str]) -> str | None:
    """ "PCIe link x4 of x16 (gen3 of gen4)" when the link runs below what the GPU and the
    host's slot allow (a lower generation only under load); None when it does not or the
    row does not say."""
    width, width_max = (
        cause_number(row.get("pcie.link.width.current")),
        cause_number(row.get("pcie.link.width.max")),
    )
    gen, gen_max = (
        cause_number(row.get("pcie.link.gen.current")),
        cause_number(row.get("pcie.link.gen.max")),
    )
    host_max = cause_number(row.get("pcie.link.gen.hostmax"))
    if gen_max is not None and host_max is not None:
        gen_max = min(gen_max, host_max)  # a gen4 GPU in a gen3 slot trains at gen3 by design
    narrow = width is not None and width_max is not None and width < width_max
    busy = cause_number(row.get("utilization.gpu"))
    slow_gen = gen is not None and gen_max is not None and gen < gen_max
    gen_text = f"gen{gen:g} of gen{gen_max:g}" if slow_gen and gen_max is not None else ""
    if narrow and width_max is not None:
        return f"PCIe link x{width:g} of x{width_max:g}" + (f" ({gen_text})" if gen_text else "")
    if slow_gen and busy is not None and busy >= CAUSE_LOADED_PERCENT:
        return f"PCIe link {gen_text} under load"
    return None


def cause_gpu_row(rows: list[dict[str, str]], index: int) -> dict[str, str] | None:
    for row in rows:
        if cause_number(row.get("index")) == index:
            return row
    return None


def cause_gpu_words(row: dict[str, str]) -> tuple[list[str], bool]:
    """(causes in words, whether the clocks were told) of one GPU row."""
    name = f"GPU {row.get('index', '?')}"
    out = []
    reasons = cause_throttle_reasons(row)
    if reasons:
        out.append(f"{name} clocks throttled: " + ", ".join(reasons))
    link = cause_pcie_words(row)
    if link:
        out.append(f"{name} {link}")
    return out, reasons is not None


def _cause_same_gpu(app: dict[str, str], row: dict[str, str]) -> bool:
    uuid = cell_text(app.get("gpu_uuid"))
    if uuid and uuid == cell_text(row.get("uuid")):
        return True
    bus = cell_text(app.get("gpu_bus_id"))
    return bool(bus) and (bus or "").lower() == (cell_text(row.get("pci.bus_id")) or "").lower()


def cause_foreign_pids(
    apps: list[dict[str, str]], row: dict[str, str], is_ours: Callable[[int], bool]
) -> list[int]:
    """The pids on the GPU of ``row`` that ``is_ours`` (this job's) does not claim."""
    out = []
    for app in apps:
        pid = cause_number(app.get("pid"))
        if pid is not None and _cause_same_gpu(app, row) and not is_ours(int(pid)):
            out.append(int(pid))
    return out


def cause_shared_words(index: object, pids: list[int], users: dict[int, str | None]) -> str:
    """ "GPU 1 shared with pid 4242 (user bob)", more pids comma-separated."""
    named = [f"pid {p} (user {users.get(p) or 'unknown'})" for p in pids[:3]]
    more = f" and {len(pids) - 3} more" if len(pids) > 3 else ""
    return f"GPU {index} shared with " + ", ".join(named) + more
