"""`gpus` starts its samplers without health readers: each reader is a process on every
host (nvidia-smi's health query, journalctl), and `gpus` shows no health. The real
sampler program, one-shot as `gpus --json` runs it, with the nvidia-smi STAND-IN first
on its PATH (no GPU here; tests/standin/nvidia-smi replays a captured H200)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil

from console.hostprogs.sampler.program import NO_HEALTH
from console.inventory import Host
from console.probe import sampler

STANDIN = Path(__file__).resolve().parent.parent / "standin"


def one_shot(*extra: str) -> tuple[dict[str, object], list[list[str]]]:
    """The sampler's one line, and the command line of every nvidia-smi it started."""
    env = dict(os.environ, PATH=f"{STANDIN}:{os.environ['PATH']}")
    argv = [sys.executable, "-u", "-", "0", "auto", "0", "node0", "x", *extra]
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdin is not None
    proc.stdin.write(sampler.program_source().encode())
    proc.stdin.close()
    seen: list[list[str]] = []
    me = psutil.Process(proc.pid)
    while proc.poll() is None:  # its readers live a few hundred ms: watch them start
        try:
            for child in me.children(recursive=True):
                line = child.cmdline()
                if any("nvidia-smi" in word for word in line) and line not in seen:
                    seen.append(line)
        except psutil.Error:
            continue
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.wait(timeout=30)
    assert proc.returncode == 0, err
    return json.loads(out.decode().splitlines()[-1]), seen


def test_a_sampler_told_no_health_starts_no_health_reader_and_keeps_the_gpus() -> None:
    line, started = one_shot(NO_HEALTH)
    assert line["gpu_source"] == "nvidia-smi" and line["nvsmi"], line
    assert isinstance(line["procs"], dict)  # the GPU processes' owners are still read
    health = line["health"]
    assert isinstance(health, dict) and health["nvsmi"] is None and health["xid_source"] is None
    queries = {w for argv in started for w in argv if w.startswith("--query-gpu=")}
    assert len(queries) == 1, started  # the figures' query only
    # Without the word, the health query runs (what the console's screens read).
    line, _started = one_shot()
    health = line["health"]
    assert isinstance(health, dict) and health["nvsmi"] is not None, line


def test_gpus_asks_for_no_health_and_other_samplers_keep_it() -> None:
    host = Host(name="node0", address="10.0.0.1")
    assert sampler.sampler_host_program(host, 0.0, health=False).args[-1] == NO_HEALTH
    assert NO_HEALTH not in sampler.sampler_host_program(host, 0.0).args
