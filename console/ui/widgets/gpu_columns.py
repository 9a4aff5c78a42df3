"""The GPU screen's columns: one layout for every host panel and the header above them.

Every panel of the screen has the same width, so one :class:`GpuColumns` made from that
width and the longest GPU name in the cluster lines up every GPU line under one header.
What gives way as the terminal narrows: first the history, then the bars (the figures
stay), and the name column only where even the alerts would have no room.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.widgets import Static

from console import display
from console.probe.models import HostView
from console.transport.base import HostState, HostStatus

HISTORY = 120  # samples of utilization kept per GPU: the widest history line drawn
BAR = 10
MAX_NAME = 32
# Figures each GPU line always has: index, the space after the name, utilization,
# memory, temperature and power, at the widths GpuPanel writes them.
UTIL_FIGURE = 7  # " 100%  "
MEMORY_FIGURE = 14  # " 80.0/80.0G  "
TEMP_FIGURE = 5  # " 91°C"
POWER_FIGURE = 12  # " 400/400W "
FIXED = 3 + 1 + UTIL_FIGURE + MEMORY_FIGURE + TEMP_FIGURE + POWER_FIGURE
TAIL = 20  # after the history: "  ⚠ idle under a job"
WIDE_TAIL = 36  # ... and a process label ("  resnet-ddp r3") where there is room
MIN_SPARK = 8
MIN_NAME = 8


@dataclass(frozen=True, slots=True)
class GpuColumns:
    name: int  # cells of the GPU name column
    bar: int  # cells of each bar; 0: figures only
    spark: int  # cells of the utilization history; 0: none

    @classmethod
    def fit(cls, width: int, longest_name: int) -> GpuColumns:
        name = max(MIN_NAME, min(longest_name, MAX_NAME))
        free = width - FIXED - name
        if free + 2 < TAIL:
            # Even the alerts would be cut: the name gives way, down to a readable stub.
            name = max(MIN_NAME, name - (TAIL - 2 - free))
            free = width - FIXED - name
        for bar, tail in ((BAR, WIDE_TAIL), (BAR, TAIL), (BAR // 2, TAIL)):
            room = free - 2 * bar - tail
            if room >= MIN_SPARK:
                return cls(name, bar, min(HISTORY, room))
        # Figures only: without bars to set them apart, one space after each is enough.
        room = free + 2 - TAIL
        return cls(name, 0, min(HISTORY, room) if room >= MIN_SPARK else 0)

    @property
    def gap(self) -> int:
        """Spaces after the utilization and the memory figures."""
        return 2 if self.bar else 1

    @property
    def util_width(self) -> int:
        return self.bar + UTIL_FIGURE - 2 + self.gap

    @property
    def memory_width(self) -> int:
        return self.bar + MEMORY_FIGURE - 2 + self.gap


DEFAULT_COLUMNS = GpuColumns(16, BAR, 16)


def header_text(columns: GpuColumns) -> Text:
    """Column headings over the GPU lines, at the same widths."""
    util = "utilization" if columns.util_width >= 12 else "util"
    memory = "memory used/total" if columns.memory_width >= 18 else "memory"
    parts = [
        f"{'#':>2} ",
        f"{'GPU':<{columns.name}} ",
        f"{util:<{columns.util_width}}",
        f"{memory:<{columns.memory_width}}",
        f"{'temp':>{TEMP_FIGURE}}",
        f" {'power W':>{POWER_FIGURE - 2}} ",
    ]
    if columns.spark:
        history = "utilization history" if columns.spark >= 20 else "history"
        parts.append(f"{history:<{columns.spark}}"[: columns.spark])
    parts.append("  alerts · processes")
    return Text("".join(parts), style="bold", no_wrap=True, overflow="ellipsis")


class GpuColumnsHeader(Static):
    """The headings line above the panels, indented like a panel's content."""

    DEFAULT_CSS = """
    GpuColumnsHeader {
        height: 1;
        padding: 0 2;
        color: $text-muted;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(header_text(DEFAULT_COLUMNS), id=id)
        self.columns = DEFAULT_COLUMNS

    def show(self, columns: GpuColumns) -> None:
        if columns != self.columns:
            self.columns = columns
            self.update(header_text(columns))


def no_sample_note(view: HostView | None, status: HostStatus | None, now: float) -> str:
    """What a panel without a sample says: the host's state, since when, and why."""
    state = view.state if view is not None else (status.state if status else HostState.CONNECTING)
    reason = view.reason if view is not None and view.reason else ""
    if not reason and status is not None and status.state is state:
        reason = status.reason
    reason = " ".join(reason.split())
    since = status.since if status is not None and status.state is state else None
    when = f" since {display.ago(since, now)}" if since is not None else ""
    if state is HostState.UP:
        return f"up{when}: {reason or 'waiting for the first sample'}"
    return f"{state.value}{when}: {reason}" if reason else f"{state.value}{when}"
