"""Every benchmark still runs and prints its table (tiny sizes; no timing is asserted).

The figures themselves are for people (see bench/README.md); this only keeps the
scripts from rotting as the code under them changes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

RUNS = {
    "connect": (["--hosts", "2", "--repeat", "1"], "ratio"),
    "connect --rtt-ms": (["--hosts", "2", "--repeat", "1", "--rtt-ms", "20"], "ratio"),
    "monitor": (["--hosts", "2", "--duration", "2"], "first frame"),
    "metrics": (["--hosts", "2", "--repeat", "2"], "scrape ms"),
    "cluster_ui": (["--hosts", "2", "--duration", "2", "--repeat", "1"], "first frame"),
    "launch": (["--hosts", "2", "--repeat", "1"], "ratio"),
    "sampler_start": (["--repeat", "1", "--duration", "1"], "1st sample"),
    "sampler_health": (["--duration", "1"], "cpu ms/sample"),
    "gpus_cli": (["--hosts", "1", "--repeat", "1", "--demo", "2"], "wall ratio"),
    "gpus_cli --timeline": (["--hosts", "1", "--repeat", "1", "--timeline", "1"], "sample read"),
    "sync": (["--size-mb", "2", "--small-files", "20", "--large-files", "1"], "ratio"),
    "logs": (
        [
            "--duration",
            "1",
            "--ranks",
            "4",
            "--rate",
            "2000",
            "--repeat",
            "1",
            "--modes",
            "decode,follower,naive",
        ],
        "lines/s",
    ),
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_benchmark_runs_and_prints_its_table(name: str) -> None:
    if name.split()[0] in ("logs", "sync", "gpus_cli") and os.geteuid() != 0:
        pytest.skip(f"bench/{name}.py starts its own sshd hosts, which needs root")
    args, heading = RUNS[name]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / f"{name.split()[0]}.py"), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert heading in proc.stdout.lower(), proc.stdout[-2000:]
