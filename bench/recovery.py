"""Crash -> first training step after recovery: --max-restarts vs the naive way.

A ddp job of ``example:ddp`` on 2 real sshd hosts x 2 ranks (``tests/sshd_cluster.py``;
root needed), launched detached through the real CLI; rank 1 exits 3 once at step
``--crash-at`` (``--crash-once``), checkpoints every 5 steps into
``--checkpoint-dir ~/<name>`` on each host.

- restart: ``--max-restarts 1``: torchrun (c10d) restarts every worker, they resume from
  the checkpoint, the job goes on by itself;
- naive: no restarts: fail-fast stops the job; this script relaunches the same command
  the moment the job reads failed (a person who reacts at once: the best case), which
  resumes from the same checkpoints.

Timed here by following the job's files on the hosts every 20 ms: the crash = the
crashing rank's "crashing at step" line seen; recovered = the first "step K/N" line seen
after a "resumed from step" line. Also printed: the step it resumed from and the job's
wall time.

    python bench/recovery.py [--repeat 3] [--crash-at 30] [--steps 60] [--sleep 0.05]
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "tests")]

from sshd_cluster import SshdCluster, unavailable_reason  # noqa: E402

CLI = [sys.executable, "-m", "console"]
STEP = re.compile(r"rank \d+ step (\d+)/")
RESUMED = re.compile(r"resumed from step (\d+)")


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=300)


def launch(env: dict[str, str], cluster: SshdCluster, args: argparse.Namespace, *extra: str) -> str:
    result = cli(
        env, "launch", str(cluster.inventory_path), "--detach", "--skip-preflight",
        "--kind", "ddp", "--gpus-per-host", "2", *extra, "--", "example:ddp",
        "--steps", str(args.steps), "--sleep", str(args.sleep), "--crash-rank", "1",
        "--crash-at-step", str(args.crash_at), "--crash-once",
    )  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"launch failed: {result.stderr}")
    return result.stdout.strip()


def job_files(cluster: SshdCluster, job_id: str) -> list[Path]:
    found = []
    for host in cluster.hosts:
        home = Path(pwd.getpwnam(host.user).pw_dir)
        job_dir = home / "distconsole" / ".distconsole" / "jobs" / job_id
        found += sorted(job_dir.glob("torchrun-*.out")) + sorted(job_dir.glob("torchrun-*.err"))
    return found


def leader_state(cluster: SshdCluster, job_id: str) -> str:
    home = Path(pwd.getpwnam(cluster.hosts[0].user).pw_dir)
    path = home / "distconsole" / ".distconsole" / "jobs" / job_id / "supervisor.json"
    try:
        return str(json.loads(path.read_text()).get("state"))
    except (OSError, ValueError):
        return "starting"


class Follower:
    """Reads new lines of every job file as they appear, stamped when seen."""

    def __init__(self) -> None:
        self.offsets: dict[Path, int] = {}
        self.crash: float | None = None
        self.resumed_step: int | None = None
        self.recovered: float | None = None

    def poll(self, files: list[Path]) -> None:
        now = time.monotonic()
        for path in files:
            try:
                with path.open("rb") as handle:
                    handle.seek(self.offsets.get(path, 0))
                    data = handle.read()
            except OSError:
                continue
            cut = data.rfind(b"\n") + 1
            self.offsets[path] = self.offsets.get(path, 0) + cut
            for line in data[:cut].decode(errors="replace").splitlines():
                self.feed(line, now)

    def feed(self, line: str, now: float) -> None:
        if self.crash is None and "crashing at step" in line:
            self.crash = now
        resumed = RESUMED.search(line)
        if resumed and self.crash is not None and self.resumed_step is None:
            self.resumed_step = int(resumed.group(1))
        if self.resumed_step is not None and self.recovered is None and STEP.search(line):
            self.recovered = now


def run_once(
    cluster: SshdCluster, env: dict[str, str], args: argparse.Namespace, mode: str
) -> dict:
    ckpt = f"~/bench-ckpt-{mode}-{time.time_ns()}"
    extra = ("--checkpoint-dir", ckpt) + (("--max-restarts", "1") if mode == "restart" else ())
    started = time.monotonic()
    job_ids = [launch(env, cluster, args, *extra)]
    follower = Follower()
    deadline = started + 300
    while time.monotonic() < deadline:
        follower.poll([f for job in job_ids for f in job_files(cluster, job)])
        state = leader_state(cluster, job_ids[-1])
        if mode == "naive" and state == "failed" and len(job_ids) == 1:
            job_ids.append(launch(env, cluster, args, *extra))  # the person, at once
        elif state in ("succeeded", "failed", "stopped") and (
            mode == "restart" or len(job_ids) == 2
        ):
            follower.poll([f for job in job_ids for f in job_files(cluster, job)])
            break
        time.sleep(0.02)
    return {
        "state": leader_state(cluster, job_ids[-1]),
        "recovery_s": (follower.recovered - follower.crash)
        if follower.recovered is not None and follower.crash is not None
        else None,
        "resumed_from": follower.resumed_step,
        "wall_s": time.monotonic() - started,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--crash-at", type=int, default=30)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--sleep", type=float, default=0.05)
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason is not None:
        raise SystemExit(f"no sshd cluster here: {reason}")
    results: dict[str, list[dict]] = {"restart": [], "naive": []}
    with tempfile.TemporaryDirectory() as tmp:
        cluster = SshdCluster(Path(tmp) / "cluster", 2)
        env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(Path(tmp) / "data"))
        try:
            for _ in range(args.repeat):
                for mode in ("restart", "naive"):
                    result = run_once(cluster, env, args, mode)
                    results[mode].append(result)
                    print(f"{mode:8} {json.dumps(result)}", flush=True)
        finally:
            cluster.close()
    print(
        f"\n2 sshd hosts x 2 ranks, example:ddp, crash at step {args.crash_at}, checkpoints every 5"
    )
    print(f"{'mode':10}{'crash -> first step after (s), median':>40}{'job wall (s)':>16}")
    medians = {}
    for mode, rows in results.items():
        times = [r["recovery_s"] for r in rows if r["recovery_s"] is not None]
        medians[mode] = statistics.median(times) if times else None
        wall = statistics.median(r["wall_s"] for r in rows)
        shown = f"{medians[mode]:.2f}" if medians[mode] is not None else "n/a"
        print(f"{mode:10}{shown:>40}{wall:>16.1f}")
    if medians["restart"] and medians["naive"]:
        print(f"naive / restart: {medians['naive'] / medians['restart']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
