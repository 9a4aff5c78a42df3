"""The per-rank meter (console/hostprogs/pace/meter.py) on real processes of this
machine: a rank that computes reads busy near 1, a rank that sleeps (as a fast rank
waiting in a gloo collective does) near 0, whatever its on-CPU share; a rank's own
child (a data loader worker inheriting RANK) and other jobs' ranks are left out."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from console.hostprogs.pace.meter import PaceMeter, pace_ranks

SPIN = "import time\nwhile True:\n    time.perf_counter()\n"
# Sleeps, with a child of its own that inherits RANK (a data loader worker).
SLEEP_WITH_CHILD = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "time.sleep(600)\n"
)


@pytest.fixture
def job() -> Iterator[tuple[str, dict[int, subprocess.Popen[bytes]]]]:
    job_id = uuid.uuid4().hex[:12]
    procs: dict[int, subprocess.Popen[bytes]] = {}
    scripts = {0: SPIN, 1: SLEEP_WITH_CHILD}
    try:
        for rank, script in scripts.items():
            env = dict(os.environ, DISTCONSOLE_JOB_ID=job_id, RANK=str(rank), LOCAL_RANK="0")
            procs[rank] = subprocess.Popen([sys.executable, "-c", script], env=env)
        # Another job's rank 0 on the same machine.
        other = dict(os.environ, DISTCONSOLE_JOB_ID="another-job", RANK="0")
        procs[9] = subprocess.Popen([sys.executable, "-c", SPIN], env=other)
        yield job_id, procs
    finally:
        for proc in procs.values():
            subprocess.run(["pkill", "-KILL", "-P", str(proc.pid)], check=False)
            proc.kill()
            proc.wait()


def settled(job_id: str, sleeper: int) -> dict[int, dict[str, int | None]]:
    """The job's ranks once the sleeping one has started its child and sleeps."""
    deadline = time.monotonic() + 30
    while True:
        found = pace_ranks(job_id)
        children = subprocess.run(["pgrep", "-P", str(sleeper)], capture_output=True, text=True)
        with open(f"/proc/{sleeper}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
        if set(found) == {0, 1} and children.stdout.split() and state == "S":
            return found
        assert time.monotonic() < deadline, (found, children.stdout, state)
        time.sleep(0.1)


def test_ranks_are_the_job_s_marked_processes_not_their_children(job) -> None:  # type: ignore[no-untyped-def]
    job_id, procs = job
    found = settled(job_id, procs[1].pid)
    assert {r: p["pid"] for r, p in found.items()} == {0: procs[0].pid, 1: procs[1].pid}
    assert found[0]["local"] == 0


def test_the_computing_rank_reads_busy_the_sleeping_one_idle(job) -> None:  # type: ignore[no-untyped-def]
    job_id, procs = job
    settled(job_id, procs[1].pid)
    meter = PaceMeter(job_id)
    deadline = time.monotonic() + 30
    while {f["rank"] for f in meter.sample()} != {0, 1}:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    start = {f["rank"]: f for f in meter.sample()}
    for _ in range(6):  # 3 s, read every 0.5 s as the supervisor would every 1 s
        time.sleep(0.5)
        last = {f["rank"]: f for f in meter.sample()}
    wall = {r: last[r]["wall_s"] - start[r]["wall_s"] for r in (0, 1)}
    busy = {r: (last[r]["busy_s"] - start[r]["busy_s"]) / wall[r] for r in (0, 1)}
    assert all(w >= 2.5 for w in wall.values()), wall
    # On-CPU + run-queue: near 1 for the spinner however loaded this machine is, less the
    # wait still under way at the last reading (the kernel adds a wait when it ends:
    # at load 26 on 2 cores that was up to ~0.2 of these 3 s).
    assert busy[0] > 0.6, busy
    assert busy[1] < 0.05, busy
    assert last[0]["cpu_s"] <= last[0]["busy_s"]
