"""`distconsole health`: bad input is exit 2; the table puts failing GPUs first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from console.commands.health import render
from console.probe.health import GpuVerdict


def test_bad_inventory_is_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "console", "health", str(missing), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    bad = tmp_path / "hosts.yaml"
    bad.write_text("hosts:\n  - name: a\n    address: 127.0.0.1\n")
    done = subprocess.run(
        [sys.executable, "-m", "console", "health", str(bad), "--host", "zzz"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr


def test_table_lists_failing_gpus_first() -> None:
    rows = [
        GpuVerdict("node1", 0, "ok"),
        GpuVerdict("node1", 1, "warn", ("PCIe link x8 of x16",), 0.0),
        GpuVerdict("node2", None, "fail", ("nvidia-smi not answering",), 0.0),
    ]
    lines = render(rows).splitlines()
    assert lines[0].split() == ["HOST", "GPU", "STATE", "SINCE", "REASONS"]
    assert lines[1].split()[:3] == ["node2", "-", "fail"]
    assert lines[1].endswith("nvidia-smi not answering")
    assert lines[2].split()[:3] == ["node1", "1", "warn"]
    assert lines[-1] == "1 fail, 1 warn, 1 ok"
