"""How a GPU panel writes its figures: bars, history lines, sizes, rates, labels."""

from __future__ import annotations

from collections import deque
from itertools import islice

from rich.text import Text

from console.display import NOT_REPORTED
from console.probe.models import GpuProcess, HostSample
from console.ui.widgets.gpu_columns import BAR

SPARK = " ▁▂▃▄▅▆▇█"


def bar(fraction: float | None, width: int = BAR) -> str:
    if fraction is None:
        return "·" * width
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * filled + "░" * (width - filled)


def spark_char(value: float | None) -> str:
    """One utilization percentage as a block of the history line (blank: not reported)."""
    return " " if value is None else SPARK[1 + min(7, int(max(0.0, value) / 100 * 8 - 1e-9))]


def sparkline(values: deque[float | None] | list[float | None], width: int = 16) -> str:
    return spark_text([spark_char(v) for v in list(values)[-width:]], width)


def spark_text(chars: deque[str] | list[str], width: int) -> str:
    """The newest ``width`` characters of a history line, right-aligned."""
    if width <= 0:
        return ""
    skip = max(0, len(chars) - width)
    return "".join(islice(chars, skip, None)).rjust(width)


def gib(mib: float | None) -> str:
    return NOT_REPORTED if mib is None else f"{mib / 1024:.1f}"


def short_gpu_name(name: str | None) -> str:
    if not name:
        return NOT_REPORTED
    return name.removeprefix("NVIDIA ").removeprefix("Tesla ")


def process_label(p: GpuProcess) -> str:
    if p.job:
        rank = f" r{p.rank}" if p.rank is not None else ""
        return f"{p.job}{rank}"
    command = (p.command or "").split(" ")[0].rsplit("/", 1)[-1]
    return f"pid {p.pid}" + (f" {command}" if command else "")


def job_owner(p: GpuProcess) -> str:
    """``job J rank R``; a job's process that has no rank yet (a launcher, a rank
    before its environment is read) says only its job, not "rank None"."""
    return f"job {p.job} rank {p.rank}" if p.rank is not None else f"job {p.job}"


def rate(value: float | None) -> str:
    """Bytes/s as a short figure: 1.2M, 340K."""
    if value is None:
        return NOT_REPORTED
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}"


def host_figures(sample: HostSample) -> str:
    """The host line of a panel; a figure the host does not report reads "n/r"."""
    cpu = NOT_REPORTED if sample.cpu_percent is None else f"{sample.cpu_percent:.0f}%"
    cores = f" of {sample.cpu_count}" if sample.cpu_count else ""
    load = NOT_REPORTED if sample.load_1m is None else f"{sample.load_1m:.1f}"
    if sample.memory_used_mib is None and sample.memory_total_mib is None:
        memory = NOT_REPORTED
    else:
        memory = f"{gib(sample.memory_used_mib)}/{gib(sample.memory_total_mib)}G"
    parts = [f"cpu {cpu}{cores}", f"load {load}", f"mem {memory}"]
    if sample.net_rx_bytes_s is None and sample.net_tx_bytes_s is None:
        parts.append(f"net {NOT_REPORTED}")
    else:
        parts.append(f"net ↓{rate(sample.net_rx_bytes_s)} ↑{rate(sample.net_tx_bytes_s)}/s")
    if sample.disk_read_bytes_s is None and sample.disk_write_bytes_s is None:
        parts.append(f"disk {NOT_REPORTED}")
    else:
        parts.append(
            f"disk r {rate(sample.disk_read_bytes_s)} w {rate(sample.disk_write_bytes_s)}/s"
        )
    return "  ".join(parts)


def line_of(text: str, style: str) -> Text:
    return Text(text, style=style, no_wrap=True, overflow="ellipsis")


def one_line(text: str) -> str:
    """A line break inside a value would add a line the panel's height does not count."""
    return " ".join(text.splitlines()) if "\n" in text or "\r" in text else text
