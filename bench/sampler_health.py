"""What the health reading costs the sampler: CPU per sample with and without it, and
against spawning nvidia-smi once per poll.

Runs the real sampler program here as a host runs it (``python3 -u -``, source on stdin)
at ``--interval`` for ``--duration`` seconds, twice per GPU path: health on (the
default) and off (``DISTCONSOLE_SAMPLER_HEALTH=0``, a switch for this bench only). The
GPU paths: ``nvml`` where pynvml initialises (a machine with a GPU), and ``nvidia-smi``
(the sampler's ``-lms`` stream: a real nvidia-smi where there is one, else the STAND-IN
``tests/standin/nvidia-smi``, a Python script replaying a captured H200, which makes every
nvidia-smi start far dearer than a real one). CPU is the sampler's process tree read
from /proc (itself, its live children, the children it waited for). Side by side, the
naive way: one ``nvidia-smi --query-gpu`` with the figure and health fields per poll.

    python bench/sampler_health.py [--interval 1] [--duration 30] [--python /usr/bin/python3]

Standard library only (it also runs on a bare GPU machine with python3).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from console.hostprogs.sampler.schema import query_gpu, query_health  # noqa: E402

STANDIN = ROOT / "tests" / "standin"
TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid``, the children it waited for, and its live descendants."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                parents[int(entry)] = int(st[1])
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        st = _stat(p)
        if st is None:
            continue
        # fields after the name: state ppid ... utime(11) stime(12) cutime(13) cstime(14)
        total += (int(st[11]) + int(st[12])) / TICK
        if p == pid:
            total += (int(st[13]) + int(st[14])) / TICK
        todo += [c for c, parent in parents.items() if parent == p]
    return total


def has_nvml(python: str) -> bool:
    probe = "import pynvml; pynvml.nvmlInit()"
    return subprocess.run([python, "-c", probe], capture_output=True).returncode == 0


def env_for(path: str, health: bool, python: str) -> dict[str, str]:
    env = dict(os.environ, PATH=f"{Path(python).parent}:{os.environ['PATH']}")
    if path == "nvidia-smi" and not shutil.which("nvidia-smi"):
        env["PATH"] = f"{STANDIN}:{env['PATH']}"
    if not health:
        env["DISTCONSOLE_SAMPLER_HEALTH"] = "0"
    return env


def program(source_file: str | None) -> str:
    """The sampler as shipped (``--source``: a copy of it built elsewhere, for a machine
    without the console's dependencies)."""
    if source_file:
        return Path(source_file).read_text()
    from console.probe.sampler import program_source

    return program_source()


def run(
    source: str, python: str, path: str, health: bool, interval: float, duration: float
) -> tuple[float, int]:
    """(CPU seconds over the steady window, lines written in it)."""
    argv = [python, "-u", "-", f"{interval:g}", "auto", "0", "bench"]
    if path == "nvidia-smi":
        # Hide pynvml: a copy of the program whose NVML import fails.
        source = source.replace("import pynvml", "import pynvml_hidden_by_bench")
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env_for(path, health, python),
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(source)
    proc.stdin.close()
    for _ in range(3):  # hello, first, second: past the start
        proc.stdout.readline()
    warm = time.monotonic() + min(3.0, duration / 4)  # first health query, Xid read: start-up
    while time.monotonic() < warm:
        proc.stdout.readline()  # read as they come, so the window counts only its own lines
    cpu0, t0 = tree_cpu(proc.pid), time.monotonic()
    lines = 0
    while time.monotonic() - t0 < duration:
        if proc.stdout.readline():
            lines += 1
    cpu1 = tree_cpu(proc.pid)
    proc.kill()
    proc.wait()
    return cpu1 - cpu0, lines


def naive(polls: int) -> float:
    """CPU seconds per ``nvidia-smi --query-gpu`` (figures + health fields) started."""
    fields = ",".join(dict.fromkeys((*query_gpu(), *query_health())))
    cmd = ["nvidia-smi", "--query-gpu=" + fields, "--format=csv,noheader,nounits"]
    env = dict(os.environ)
    if not shutil.which("nvidia-smi"):
        env["PATH"] = f"{STANDIN}:{env['PATH']}"
    before = os.times()
    for _ in range(polls):
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=False)
    after = os.times()
    cpu = (
        after.children_user - before.children_user + after.children_system - before.children_system
    )
    return cpu / polls


def decode_cost(source: str, python: str, gpus: int = 8, loops: int = 2000) -> str:
    """The console's cost to decode one sample line of ``gpus`` GPUs with a health record
    and without (a sampler sends health only when it changed: at most every 5-10 s)."""
    try:
        import json

        from console.probe.sampler import decode_line
    except ImportError as exc:  # a bare GPU machine: the console's dependencies missing
        return f"console decode: not measured here ({exc})"
    env = dict(os.environ, PATH=f"{STANDIN}:{os.environ['PATH']}")
    source = source.replace("import pynvml", "import pynvml_hidden_by_bench")
    done = subprocess.run(
        [python, "-u", "-", "0", "auto", "0", "bench"],
        input=source, capture_output=True, text=True, env=env, timeout=60, check=True,
    )  # fmt: skip
    line = json.loads(done.stdout.splitlines()[1])
    for part in (line["nvsmi"], line["health"]["nvsmi"]):  # one captured GPU -> ``gpus``
        row = part["rows"][0]
        part["rows"] = [str(i) + row[row.index(",") :] for i in range(gpus)]
    with_health = json.dumps(line)
    line["health"] = None
    without = json.dumps(line)
    costs = []
    for text in (without, with_health):
        started = time.perf_counter()
        for _ in range(loops):
            decode_line("bench", text)
        costs.append((time.perf_counter() - started) / loops * 1e6)
    return (
        f"console decode of one {gpus}-GPU nvidia-smi line: {costs[0]:.0f} us without health, "
        f"{costs[1]:.0f} us with a health record"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--duration", type=float, default=30.0)
    default_python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"
    parser.add_argument("--python", default=default_python)
    parser.add_argument("--source", help="the sampler program's source file (default: built here)")
    args = parser.parse_args()
    source = program(args.source)
    found = shutil.which("nvidia-smi")
    real = found is not None and Path(found).parent != STANDIN
    paths = (["nvml"] if has_nvml(args.python) else []) + ["nvidia-smi"]
    load1, _, _ = os.getloadavg()
    print(
        f"sampler health bench: every {args.interval:g} s for {args.duration:g} s per run; "
        f"nvidia-smi: {'real' if real else 'the Python stand-in (no GPU here)'}; "
        f"{os.cpu_count()} CPUs, load {load1:.2f}; CPU % is of one core",
        flush=True,
    )
    print(f"{'GPU path':<10}  {'health':>6}  {'lines':>5}  {'CPU ms/sample':>13}  {'CPU %':>6}")
    for path in paths:
        for health in (False, True):
            cpu, lines = run(source, args.python, path, health, args.interval, args.duration)
            per = 1000 * cpu / max(lines, 1)
            pct = 100 * cpu / args.duration
            on = "on" if health else "off"
            print(f"{path:<10}  {on:>6}  {lines:>5}  {per:>13.2f}  {pct:>5.2f}%", flush=True)
    print(decode_cost(source, args.python), flush=True)
    spawn = naive(5)
    print(
        "naive: one nvidia-smi --query-gpu (figures + health) per poll: "
        f"{1000 * spawn:.1f} ms CPU each = {100 * spawn / args.interval:.2f}% of a core "
        f"at one poll per {args.interval:g} s"
    )
    print(
        f"command: python bench/sampler_health.py --interval {args.interval:g} "
        f"--duration {args.duration:g} --python {args.python}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
