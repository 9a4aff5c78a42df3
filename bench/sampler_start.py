"""The sampler on one host: start -> first sample, and its steady CPU, vs re-running.

Runs the real sampler program on THIS machine as a host would run it (``python3 -u -``
with the program on stdin, what ``console/probe/sampler.py`` ships), in two GPU modes:

- ``nvidia-smi``: the GPU STAND-IN (``tests/standin/nvidia-smi``, a real captured H200,
  itself a Python script: this machine has no GPU) first on PATH, so the sampler takes
  its nvidia-smi path (``-lms`` stream + compute-apps query);
- ``simulated``: 8 simulated GPUs (what the demo hosts run).

Printed per mode, median over ``--repeat`` starts: time to the hello line, to the first
sample line and to the second (the one with CPU %: the console's first frame waits for
it); then the sampler's steady CPU % of one core over ``--duration`` s at 1 Hz, the
sampler process alone and with its children (the nvidia-smi stream and queries: here
the stand-in, a Python script, so that column overstates a real nvidia-smi). Side by
side, the naive way: a one-shot sampler (interval 0, what polling tools start per
refresh) every interval: its wall time per refresh and CPU % at 1 Hz.

    python bench/sampler_start.py [--repeat 5] [--duration 10] [--python /usr/bin/python3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from common import fmt, positive_float, positive_int, print_header  # noqa: E402

from console.probe.sampler import program_source  # noqa: E402

STANDIN = ROOT / "tests" / "standin"
MODES = {"nvidia-smi": ("auto", "0"), "simulated": ("simulated", "8")}


def _env(mode: str, python: str) -> dict[str, str]:
    """The host's PATH: the chosen python3 first (the stand-in runs on ``env python3``;
    a version manager's shim there would be timed too), the stand-in before it."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(python).parent}:{env['PATH']}"
    if mode == "nvidia-smi":
        env["PATH"] = f"{STANDIN}:{env['PATH']}"
    return env


def _tree_cpu(proc: psutil.Process) -> tuple[float, float]:
    """(this process's CPU s, + its children's, live and waited for)."""
    t = proc.cpu_times()
    own = t.user + t.system
    total = own + t.children_user + t.children_system
    for child in proc.children(recursive=True):
        try:
            c = child.cpu_times()
        except psutil.Error:
            continue
        total += c.user + c.system
    return own, total


def start_once(python: str, mode: str, duration: float) -> dict[str, Any]:
    gpu_mode, gpus = MODES[mode]
    source = program_source().encode()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [python, "-u", "-", "1", gpu_mode, gpus, "bench"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_env(mode, python),
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(source)
    proc.stdin.close()
    marks = []
    for _ in range(3):  # hello, first sample, second sample
        if not proc.stdout.readline():
            raise SystemExit(f"the sampler ({mode}) ended early, status {proc.wait()}")
        marks.append(time.perf_counter() - t0)
    result: dict[str, Any] = {"hello": marks[0], "first": marks[1], "second": marks[2]}
    if duration > 0:
        ps = psutil.Process(proc.pid)
        own0, all0 = _tree_cpu(ps)
        t1 = time.perf_counter()
        end = t1 + duration
        while time.perf_counter() < end:
            proc.stdout.readline()
        own1, all1 = _tree_cpu(ps)
        elapsed = time.perf_counter() - t1
        result["cpu_own"] = 100 * (own1 - own0) / elapsed
        result["cpu_all"] = 100 * (all1 - all0) / elapsed
    proc.kill()
    proc.wait()
    return result


def one_shot(python: str, mode: str) -> tuple[float, float]:
    """(wall s, CPU s of it and its children) of a one-shot sampler (interval 0)."""
    gpu_mode, gpus = MODES[mode]
    before = os.times()
    t0 = time.perf_counter()
    argv = [python, "-u", "-", "0", gpu_mode, gpus, "bench"]
    source = program_source().encode()
    env = _env(mode, python)
    subprocess.run(argv, input=source, stdout=subprocess.DEVNULL, env=env, check=True)
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return time.perf_counter() - t0, cpu


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=positive_int, default=5, help="starts per mode")
    parser.add_argument("--duration", type=positive_float, default=10.0, help="steady seconds")
    default_python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"
    parser.add_argument("--python", default=default_python, help="the host's python3")
    args = parser.parse_args(argv)
    if shutil.which(args.python) is None:
        raise SystemExit(f"--python: {args.python} not found")
    version = subprocess.run(
        [args.python, "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    load1, load5, _ = os.getloadavg()
    print(
        f"sampler bench: the sampler run here as a host runs it ({args.python}, Python "
        f"{version}), every 1 s; {args.repeat} starts per mode (median), {args.duration:g} s "
        f"steady; {os.cpu_count()} CPUs, load average {load1:.2f} / {load5:.2f}; CPU % is of "
        "one core",
        flush=True,
    )
    header = (
        f"{'mode':<10}  {'hello':>7}  {'1st sample':>10}  {'2nd sample':>10}  "
        f"{'steady CPU: sampler':>19}  {'+ children':>10}  {'naive: one-shot':>15}  "
        f"{'its CPU at 1 Hz':>15}  {'CPU ratio':>9}"
    )
    print_header(header)
    for mode in MODES:
        runs = [start_once(args.python, mode, 0) for _ in range(args.repeat - 1)]
        runs.append(start_once(args.python, mode, args.duration))
        shots = [one_shot(args.python, mode) for _ in range(args.repeat)]
        med = {k: statistics.median(r[k] for r in runs) for k in ("hello", "first", "second")}
        steady = runs[-1]
        shot_wall = statistics.median(s[0] for s in shots)
        shot_cpu = 100 * statistics.median(s[1] for s in shots)  # CPU s per 1 s refresh
        ratio = shot_cpu / steady["cpu_all"] if steady["cpu_all"] else None
        print(
            f"{mode:<10}  {1000 * med['hello']:>4.0f} ms  {1000 * med['first']:>7.0f} ms  "
            f"{1000 * med['second']:>7.0f} ms  {steady['cpu_own']:>17.2f} %  "
            f"{steady['cpu_all']:>8.2f} %  {1000 * shot_wall:>12.0f} ms  {shot_cpu:>13.1f} %  "
            f"{fmt(ratio, '.1f'):>8}x",
            flush=True,
        )
    print(
        "hello / 1st / 2nd sample: from starting python3 to that line on its stdout; "
        "+ children: with the nvidia-smi stream and queries it runs (here the Python "
        "stand-in); naive: a one-shot sampler per refresh (wall time, CPU % at 1 Hz, with "
        "children); CPU ratio: naive / streaming sampler with children"
    )
    print("targets: start -> first sample <= 150 ms; steady CPU <= 1 % of one core")
    print(f"command: python bench/sampler_start.py --repeat {args.repeat} "
          f"--duration {args.duration:g} --python {args.python}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
