"""Hang detection end to end on real sshd hosts with their own users, no console running
after ``launch --detach``: a DDP job (real torchrun, gloo) whose rank 1 is frozen with
SIGSTOP is marked hung by the host supervisors, every rank is captured (the stopped
rank's state, the live rank's stack inside its all_reduce), then, with --stop-on-hang,
stopped (failed, nothing left), and ``report`` holds both captures."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.integration.test_jobs_cli import assert_nothing_left, dc, live_processes
from tests.integration.test_supervisor import job_dir, wait_for

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

# Every rank meets every other in all_reduce each step: one frozen rank holds them all.
# Until its first step a rank prints a line every 0.5 s: importing torch and meeting the
# other rank take seconds (more on a cold machine) and must not read as a hang; from its
# first step on, only its steps print.
TRAIN = """
import threading
import time

started = threading.Event()


def starting():
    while not started.wait(0.5):
        print("starting", flush=True)


threading.Thread(target=starting, daemon=True).start()

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
grads = torch.ones(4)


def train_step():
    dist.all_reduce(grads)


for step in range(1, 10**9):
    train_step()
    print(f"rank {rank} step {step}", flush=True)
    started.set()
    time.sleep(0.2)
"""

# Far above a step's 0.2 s; the start prints (above) until training runs.
HANG_TIMEOUT_S = 10


@pytest.fixture
def program() -> Any:
    """The training script where every host user can read it."""
    folder = Path(tempfile.mkdtemp(prefix="dc-hang-", dir="/tmp"))
    folder.chmod(0o755)
    path = folder / "allreduce_train.py"
    path.write_text(TRAIN)
    path.chmod(0o644)
    yield path
    path.unlink()
    folder.rmdir()


def worker_of(user: str, script: Path) -> psutil.Process | None:
    """The torchrun worker (not the agent) running ``script`` as ``user``."""
    for proc in psutil.process_iter(["username", "cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if proc.info["username"] == user and str(script) in cmd and "torch" not in cmd:
            return proc
    return None


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def test_a_frozen_rank_marks_the_job_hung_and_every_rank_is_captured(
    sshd_cluster, tmp_path, program
) -> None:
    cluster = sshd_cluster(n=2)
    inv = str(cluster.inventory_path)
    launched = dc(
        tmp_path, "launch", inv, "--kind", "ddp", "--gpus-per-host", "1",
        "--hang-timeout", str(HANG_TIMEOUT_S), "--stop-on-hang", "--grace", "2",
        "--skip-preflight", "--detach",
        "--", str(program),
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    job_id = launched.stdout.strip()
    leader_dir, follower_dir = (job_dir(cluster, h, job_id) for h in ("node0", "node1"))
    stopped: psutil.Process | None = None
    try:
        # Training runs: rank 1 has printed steps (through torchrun's tee) on node1.
        wait_for(lambda: "rank 1 step 3" in _text(follower_dir / "torchrun-1.out"), timeout=120)
        stopped = worker_of(cluster.host("node1").user, program)
        assert stopped is not None
        stopped.send_signal(signal.SIGSTOP)
        frozen_at = time.time()

        def hung() -> bool:
            state = read_json(leader_dir / "supervisor.json") or {}
            return bool(state.get("hang"))  # state "hung", then "failed" (stop on hang)

        wait_for(hung, timeout=120, step=0.2)
        leader = read_json(leader_dir / "supervisor.json") or {}
        print(f"\nhung recorded {leader['hang']['at'] - frozen_at:.1f} s after the SIGSTOP")
        captures = (
            leader_dir / "hang" / "torchrun-0.json",
            follower_dir / "hang" / "torchrun-1.json",
        )
        wait_for(lambda: all(read_json(c) for c in captures), timeout=60, step=0.2)
        live, frozen = (read_json(c) or {} for c in captures)

        frozen_worker = next(p for p in frozen["processes"] if p["pid"] == stopped.pid)
        assert frozen_worker["state_name"] == "stopped"
        assert "stopped" in frozen_worker["faulthandler_problem"]

        live_stacks = [p["faulthandler"] or "" for p in live["processes"]]
        in_collective = [s for s in live_stacks if "in all_reduce" in s and "in train_step" in s]
        assert in_collective, live_stacks
        assert live["last_step"]["step"] >= 3
        assert frozen["last_step"]["step"] >= 3

        # --stop-on-hang: after the captures the supervisors stop the job everywhere (the
        # frozen rank takes the grace, 2 s here: only SIGKILL reaches a stopped process).
        wait_for(lambda: not live_processes(cluster), timeout=90, step=0.5)
        wait_for(lambda: (read_json(leader_dir / "supervisor.json") or {}).get("ended_at"))
        leader = read_json(leader_dir / "supervisor.json") or {}
        assert leader["state"] == "failed"
        # The leader's record lists every rank captured, node1's (sent by its supervisor) too.
        assert sorted(leader["hang"]["captured"]) == ["torchrun-0", "torchrun-1"], leader

        out = tmp_path / "report"
        report = dc(tmp_path, "report", inv, job_id, "--out", str(out))
        assert report.returncode == 0, report.stderr
        bundled = {p.name: p for p in out.rglob("torchrun-*.json") if p.parent.name == "hang"}
        assert set(bundled) == {"torchrun-0.json", "torchrun-1.json"}
        assert "stopped" in bundled["torchrun-1.json"].read_text()
        assert "in all_reduce" in bundled["torchrun-0.json"].read_text()
        summary = (out / "summary.txt").read_text()
        # The summary tells the hang and names the frozen rank as the stuck one.
        assert "hang" in summary.lower() and "node1 torchrun-1 rank 1" in summary, summary
        assert re.search(
            r"first failure: hung: no progress for \d+ s; stopped because --stop-on-hang",
            summary,
        ), summary
        assert re.search(
            r"hang: no progress for \d+ s, marked at .*; captured .*torchrun-1", summary
        )
    finally:
        if stopped is not None:
            with contextlib.suppress(psutil.Error):
                stopped.send_signal(signal.SIGCONT)
        dc(tmp_path, "stop", inv, job_id)
    assert_nothing_left(cluster)


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
