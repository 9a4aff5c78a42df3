"""A host panel's GPU lines and the process lines below them (``gpu_panel.HostPanel``)."""

from __future__ import annotations

from rich.text import Text
from textual.theme import Theme

from console import display
from console.display import NOT_REPORTED
from console.probe.models import GpuSample
from console.ui.theming import state_colour
from console.ui.widgets.gpu_columns import GpuColumns
from console.ui.widgets.gpu_text import (
    bar,
    gib,
    job_owner,
    line_of,
    one_line,
    process_label,
    short_gpu_name,
)

MAX_PROCESS_LINES = 4


def gpu_line(
    gpu: GpuSample, theme: Theme, columns: GpuColumns, spark: str, alerts: list[str]
) -> Text:
    """One GPU's line: index, name, utilization and memory bars, figures, its history
    line (``spark``, already cut to ``columns.spark``), alerts, then process labels."""
    line = Text(no_wrap=True, overflow="ellipsis")
    util = gpu.utilization_gpu
    memory = gpu.memory_fraction
    line.append(f"{gpu.index:>2} ", style="bold")
    line.append(f"{display.clip(short_gpu_name(gpu.name), columns.name):<{columns.name}} ")
    if columns.bar:
        fraction = None if util is None else util / 100
        line.append(bar(fraction, columns.bar), style=theme.primary or "")
    gap = " " * columns.gap
    line.append(f" {NOT_REPORTED if util is None else f'{util:.0f}%':>4}{gap}")
    mem_style = theme.warning if memory is not None and memory >= 0.9 else theme.secondary
    if columns.bar:
        line.append(bar(memory, columns.bar), style=mem_style or "")
    used = f"{gib(gpu.memory_used_mib)}/{gib(gpu.memory_total_mib)}G"
    line.append(f" {used:>11}{gap}")
    temp = NOT_REPORTED if gpu.temperature_c is None else f"{gpu.temperature_c:.0f}°C"
    hot = "hot" in alerts
    line.append(f"{temp:>5}", style=f"bold {theme.error}" if hot else "")
    draw = NOT_REPORTED if gpu.power_draw_w is None else f"{gpu.power_draw_w:.0f}"
    limit = NOT_REPORTED if gpu.power_limit_w is None else f"{gpu.power_limit_w:.0f}"
    line.append(f" {draw + '/' + limit + 'W':>10} ")
    line.append(spark, style=theme.accent or "")
    # Alerts before process labels: a narrow panel cuts the labels, not the warning.
    if alerts:
        colour = state_colour(theme, "down")
        line.append("  ⚠ " + ", ".join(alerts), style=f"bold {colour}")
    labels = sorted({one_line(process_label(p)) for p in gpu.processes})
    # Figures only (a narrow panel): the process lines below name them; here they
    # would only push an alert into the cut.
    if labels and (columns.spark or not alerts):
        line.append("  " + ", ".join(labels))
    return line


def process_lines(gpus: list[GpuSample]) -> list[Text]:
    """The processes on the shown GPUs, a line each, at most :data:`MAX_PROCESS_LINES`."""
    rows = [(g.index, p) for g in gpus for p in g.processes]
    lines = []
    for index, p in rows[:MAX_PROCESS_LINES]:
        memory = NOT_REPORTED if p.used_memory_mib is None else f"{p.used_memory_mib / 1024:.1f}G"
        owner = one_line(job_owner(p) if p.job else (p.user or ""))
        command = display.clip(p.command or "", 60)
        line = line_of(f"   gpu{index} pid {p.pid:<7} {memory:>6}  {owner}  ", "dim")
        line.append(command, style="dim italic")
        lines.append(line)
    if len(rows) > MAX_PROCESS_LINES:
        more = len(rows) - MAX_PROCESS_LINES
        lines.append(line_of(f"   +{more} more processes (Enter: host detail)", "dim"))
    return lines
