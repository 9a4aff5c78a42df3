"""A streaming sampler's first lines, from the real program run as a local subprocess.

The first line goes out at once (the console's first frame waits on it) without CPU %
and throughput, which need a window; a second line follows after a short window with
them, before the first full interval. Simulated GPUs (no NVIDIA GPU here); host figures
from psutil (the test venv's interpreter) and from /proc (the system python3).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from console.probe import sampler

INTERVAL_S = 30.0  # long: the second line must not wait for it


def _two_lines(python: str) -> list[str]:
    proc = subprocess.Popen(
        [python, "-u", "-", f"{INTERVAL_S:g}", "simulated", "2", "node0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(sampler.program_source())
        proc.stdin.close()
        hello = proc.stdout.readline()
        assert sampler.SampleReader("node0").read(hello) is None
        return [proc.stdout.readline(), proc.stdout.readline()]
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.parametrize(
    "python",
    [
        sys.executable,
        pytest.param(
            "/usr/bin/python3",
            marks=pytest.mark.skipif(
                not os.path.exists("/usr/bin/python3"), reason="needs a system python3"
            ),
        ),
    ],
)
def test_first_line_at_once_then_a_warm_line_before_the_interval(python: str) -> None:
    first_line, second_line = _two_lines(python)
    first = sampler.decode_line("node0", first_line)
    second = sampler.decode_line("node0", second_line)
    assert len(first.gpus) == 2 and first.simulated
    assert first.memory_total_mib and first.load_1m is not None  # read at once
    assert first.cpu_percent is None  # a few ms of window: not reported, never noise
    assert first.net_rx_bytes_s is None and first.disk_read_bytes_s is None
    assert second.cpu_percent is not None and 0 <= second.cpu_percent <= 100
    assert second.net_rx_bytes_s is not None and second.disk_write_bytes_s is not None
    # The raw line times: the second came after the short window, not after INTERVAL_S.
    t1 = float(first_line.split('"t":', 1)[1].split(",", 1)[0])
    t2 = float(second_line.split('"t":', 1)[1].split(",", 1)[0])
    assert 0 < t2 - t1 < INTERVAL_S / 2
