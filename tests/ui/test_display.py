"""One formatter for values shown to people: the screens, the save file and the CLI agree."""

from __future__ import annotations

import pytest

from console import display
from console.commands.logs import format_line
from console.logs.models import LogLine
from console.probe.models import GpuSample, HostSample
from console.ui.log_render import line_text
from console.ui.screens.host_detail import gpu_row
from console.ui.widgets.gpu_panel import host_figures

LINES = [
    (LogLine("j", "node0", 3, 1, "stdout", "step 7", 0.0), "node0 r3"),
    (LogLine("j", "node1", None, None, "stdout", "up", 0.0, role="ps", task_index=0), "node1 ps0"),
    (LogLine("j", "node0", None, 2, "stdout", "x", 0.0), "node0 local2"),
    (LogLine("j", "node0", None, None, "combined", "hi", 0.0, role="launcher"), "node0 launcher"),
]


@pytest.mark.parametrize(("line", "prefix"), LINES)
def test_one_prefix_for_screen_save_file_and_cli(line: LogLine, prefix: str) -> None:
    assert display.line_prefix(line) == prefix
    # The CLI prints, and the logs screen saves, the same text.
    assert format_line(line) == display.log_line_text(line) == f"{prefix}| {line.text}"
    # The screen shows the same prefix, right-aligned, before its own separator.
    assert line_text(line, width=20).plain == f"{prefix:>20} │ {line.text}"


def test_not_reported_reads_the_same_everywhere() -> None:
    assert display.figure(None) == display.latency(None) == display.NOT_REPORTED == "n/r"
    assert display.byte_size(None) == "n/r"
    bare = GpuSample(index=0)
    assert gpu_row(bare)[1:4] == ("n/r", "n/r", "n/r")
    figures = host_figures(HostSample(name="node0", time=0.0, gpu_source="none"))
    assert figures == "cpu n/r  load n/r  mem n/r  net n/r  disk n/r"


def test_figures() -> None:
    assert display.figure(87.4, "%") == "87%"
    assert display.latency(8.42) == "8.4 ms" and display.latency(12_500) == "12.5 s"
    assert display.duration(3725) == "1:02:05" and display.duration(65) == "1:05"
    assert display.byte_size(3 * 1024**3) == "3.0 GiB"
    assert display.ago(None, 10.0) == "never" and display.ago(0.0, 125.0) == "2m ago"
