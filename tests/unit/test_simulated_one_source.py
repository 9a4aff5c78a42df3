"""Issue 30 (4, 6): one simulated GPU, whoever reads it. The console's sampler has run for
a while, ``distconsole gpus``' sampler starts fresh: both must report the same board
(its memory, its temperature), and an h100-tagged demo host shows an H100. Real parts:
a real process carrying a job id (/proc is read as on a demo host), the real sampler
program run with python3 and its program text on stdin, as a host runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from console.hostprogs.sampler.simulated import SimulatedGpus, model_for_tags
from console.inventory import Host
from console.probe.sampler import program_source, sampler_host_program


@pytest.fixture
def rank() -> Iterator[subprocess.Popen[bytes]]:
    """A running 'rank 0' of job j1 on local GPU 0, started a while ago."""
    env = dict(os.environ, DISTCONSOLE_JOB_ID="j1", RANK="0", LOCAL_RANK="0")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    time.sleep(1.5)
    yield proc
    proc.kill()
    proc.wait()


def test_a_fresh_reader_and_a_long_running_one_agree_on_the_board(
    rank: subprocess.Popen[bytes],
) -> None:
    console = SimulatedGpus("node0", 4)
    start = time.time()
    for step in range(30):  # the console's stream: a sample a second, for half a minute
        console.sample(start + step)
    later = start + 40
    cli = SimulatedGpus("node0", 4)  # `distconsole gpus`: one line from a new sampler
    seen, fresh = console.sample(later)[0], cli.sample(later)[0]
    assert rank.pid in console.sample(later)[1]
    for a, b in zip(seen, fresh, strict=True):
        for field in ("memory_used_mib", "temperature_c", "utilization_gpu", "power_draw_w"):
            assert a[field] == b[field], (field, a, b)
    busy = seen[0]
    # A rank running ~40 s holds more than its first 1.5 GB and has warmed the board.
    assert busy["memory_used_mib"] > 20_000 and busy["temperature_c"] > 55


def test_the_simulated_model_follows_the_hosts_tags() -> None:
    assert model_for_tags(("demo", "h100")) == "Simulated H100 80GB (simulated)"
    assert model_for_tags(("demo", "a100")) == "Simulated A100 80GB (simulated)"
    assert model_for_tags(()) == "Simulated A100 80GB (simulated)"
    host = Host(name="node1", address="local", gpu_source="simulated", gpus=2, tags=("h100",))
    program = sampler_host_program(host, 0)
    out = subprocess.run(
        [sys.executable, "-u", "-", *program.args],
        input=program_source(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    gpus = next(line["gpus"] for line in lines if line.get("gpus"))
    assert [g["name"] for g in gpus] == ["Simulated H100 80GB (simulated)"] * 2
