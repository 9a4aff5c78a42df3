"""Slow-rank detection from outside the ranks (issue 32): detection time and overhead.

Runs ``tests/data/pace/ddp_bursts.py`` (a gloo DDP job that knows nothing of
distconsole) under a real ``torchrun --standalone`` with N ranks on this machine, its
processes in a cgroup v1 ``cpu`` group of high weight (this machine's other load must
not be what makes a rank slow), and measures with the supervisors' own parts
(``console/hostprogs/pace``: the meter reading ``/proc/PID/task/*/schedstat`` once a
second, the leader's windowed score):

- overhead: segments with the meter on and off, alternating: the job's step time in
  each (rank 0's ``step_time`` lines), and the meter's CPU per sample and per step;
- detection: the last rank moved into a group with a 25 % CPU quota; seconds until the
  score names it (windows of ``--window`` s, slow after 2 in a row), its relative
  busy time beside the naive score (on-CPU time alone, which cannot tell the slow rank
  apart: under a quota it gets no more CPU than the ranks that wait for it).

Needs root and the cgroup v1 cpu controller at /sys/fs/cgroup/cpu (it says so and
stops otherwise). ``jobs --json`` end to end over sshd is tests/integration/test_slow_ranks.py.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from console.hostprogs.pace.meter import PaceMeter  # noqa: E402
from console.hostprogs.pace.score import PaceBoard  # noqa: E402

SCRIPT = REPO / "tests" / "data" / "pace" / "ddp_bursts.py"
CPU = Path("/sys/fs/cgroup/cpu")
STEP = re.compile(r"rank 0 step (\d+) .* step_time ([0-9.]+)")


class Job:
    def __init__(self, ranks: int) -> None:
        self.id = uuid.uuid4().hex[:12]
        torchrun = Path(sys.executable).with_name("torchrun")
        env = dict(os.environ, DISTCONSOLE_JOB_ID=self.id, OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [str(torchrun), "--standalone", "--nproc-per-node", str(ranks), str(SCRIPT)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        self.steps: list[tuple[float, float]] = []  # (when read, step time)
        threading.Thread(target=self.read, daemon=True).start()

    def read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            found = STEP.search(line)
            if found:
                self.steps.append((time.monotonic(), float(found.group(2))))

    def step_time(self, start: float, end: float) -> float | None:
        inside = [s for t, s in self.steps if start < t <= end]
        return statistics.median(inside) if inside else None

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


class Group:
    def __init__(self, name: str) -> None:
        self.path = CPU / f"distconsole-bench-{name}-{os.getpid()}"
        self.path.mkdir()
        (self.path / "cpu.shares").write_text("16384")

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def quota(self, share: float) -> None:
        (self.path / "cpu.cfs_quota_us").write_text(str(int(100000 * share)))

    def remove(self) -> None:
        for _ in range(50):
            for pid in (self.path / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (CPU / "cgroup.procs").write_text(pid)
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def overhead(job: Job, meter: PaceMeter, segment: float, repeat: int) -> None:
    on_steps, off_steps, costs = [], [], []
    for _ in range(repeat):
        for on in (True, False):
            start = time.monotonic()
            while time.monotonic() - start < segment:
                if on:
                    before = time.thread_time()
                    meter.sample()
                    costs.append(time.thread_time() - before)
                time.sleep(1.0)
            took = job.step_time(start + 1.0, time.monotonic())
            if took is not None:
                (on_steps if on else off_steps).append(took)
    step_on = statistics.median(on_steps) if on_steps else float("nan")
    step_off = statistics.median(off_steps) if off_steps else float("nan")
    per_sample = statistics.median(costs)
    threads = sum(len(os.listdir(f"/proc/{s['pid']}/task")) for s in meter.state.values())
    print(f"step time, meter on : {step_on * 1000:8.1f} ms (median of {len(on_steps)} segments)")
    print(f"step time, meter off: {step_off * 1000:8.1f} ms (the naive way: nothing at all)")
    print(f"  ratio on/off: {step_on / step_off:.3f} (load on this machine moves it either way)")
    print(
        f"meter CPU per 1 s sample: {per_sample * 1000:.2f} ms for {len(meter.state)} ranks, "
        f"{threads} threads = {per_sample * 100:.3f} % of one core"
    )
    print(
        f"meter CPU per job step: {per_sample * step_off * 1000:.3f} ms = "
        f"{per_sample * 100:.3f} % of the step time (target <= 1 %)"
    )


def detection(job: Job, meter: PaceMeter, limited: Group, window: float, ranks: int) -> None:
    board = PaceBoard(window_s=window, threshold=1.3, windows=2, start=time.time())
    slow_rank = ranks - 1
    limited.add(meter.state[slow_rank]["pid"])
    cpu: dict[int, list[float]] = {}
    before = job.step_time(time.monotonic() - 10, time.monotonic())
    quota_at = time.time()
    limited.quota(0.25)
    named_at = None
    while named_at is None and time.time() - quota_at < 8 * window:
        time.sleep(1.0)
        for item in meter.sample():
            board.feed("localhost", item)
            cpu.setdefault(item["rank"], []).append(item["cpu_s"])
        for change in board.tick(time.time()):
            if change["event"] == "slow" and change["rank"] == slow_rank:
                named_at = time.time()
    pace = {p["rank"]: p for p in board.record()["rank_pace"]}
    after = job.step_time(time.monotonic() - window, time.monotonic())
    if before and after:
        print(f"step time before the quota {before * 1000:.1f} ms, under it {after * 1000:.1f} ms")
    if named_at is None:
        print(f"rank {slow_rank} NOT named within {8 * window:.0f} s; pace: {pace}")
        return
    print(
        f"detection: rank {slow_rank} named {named_at - quota_at:.1f} s after the quota "
        f"(windows of {window:g} s, 2 in a row: {2 * window:g} s at best)"
    )
    for rank, row in sorted(pace.items()):
        print(
            f"  rank {rank}: busy {row['busy']:.2f} cpu {row['cpu']:.2f} "
            f"relative {row['relative']:.2f}"
        )
    cpus = {r: row["cpu"] for r, row in pace.items()}
    median = statistics.median(cpus.values())
    print(
        f"naive score (on-CPU time alone): rank {slow_rank} at "
        f"{cpus[slow_rank] / median:.2f}x the median, under the 1.3 threshold: never named"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--segment", type=float, default=20.0, help="s per on/off segment")
    parser.add_argument("--repeat", type=int, default=3, help="on/off segment pairs")
    parser.add_argument("--window", type=float, default=15.0, help="score window, s")
    args = parser.parse_args()
    if os.geteuid() != 0 or not (CPU / "cgroup.procs").exists():
        sys.exit("slow_ranks.py needs root and the cgroup v1 cpu controller at /sys/fs/cgroup/cpu")
    fair, limited = Group("fair"), Group("limited")
    fair.add(os.getpid())  # torchrun and its ranks inherit the weight
    job = Job(args.ranks)
    fair_back = CPU / "cgroup.procs"
    fair_back.write_text(str(os.getpid()))  # the bench itself back in the root group
    try:
        meter = PaceMeter(job.id)
        deadline = time.monotonic() + 180
        while len(meter.sample()) < args.ranks or len(job.steps) < 3:
            if time.monotonic() > deadline:
                sys.exit("the job did not train within 180 s")
            time.sleep(1.0)
        print(f"{args.ranks} ranks of {SCRIPT.name}, gloo, 1 thread each; load {os.getloadavg()}")
        overhead(job, meter, args.segment, args.repeat)
        detection(job, meter, limited, args.window, args.ranks)
    finally:
        job.stop()
        fair.remove()
        limited.remove()


if __name__ == "__main__":
    main()
