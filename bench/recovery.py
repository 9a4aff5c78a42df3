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

``--scenario host-lost``: 3 sshd hosts x 1 rank, no crash knob; when a rank of the third
host prints step ``--crash-at`` this script kills that host whole (sshd, sessions, every
process of its user: ``SshdCluster.stop``), which is the "crash" instant.

- elastic: ``--min-hosts 2 --max-restarts 3``: the supervisors scale the job down, the
  two survivors' torchruns meet again without it (the tuned rendezvous settings,
  jobs/plan/ddp.py ``ELASTIC_RDZV_CONF``) and resume from their checkpoints;
- naive: no restarts: the survivors fail (fail-fast), and this script relaunches the same
  command on the two hosts left (``--hosts node0,node1``) the moment the job reads
  failed, resuming from the same checkpoints.

    python bench/recovery.py [--scenario crash|host-lost] [--repeat 3] [--crash-at 30]
                             [--steps 60] [--sleep 0.05]
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
from collections.abc import Callable
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "tests")]

from sshd_cluster import SshdCluster, unavailable_reason  # noqa: E402

CLI = [sys.executable, "-m", "console"]
STEP = re.compile(r"rank \d+ step (\d+)/")
RESUMED = re.compile(r"resumed from step (\d+)")


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=300)


def launch(env: dict[str, str], cluster: SshdCluster, args: argparse.Namespace, *extra: str) -> str:
    crash = ("--crash-rank", "1", "--crash-at-step", str(args.crash_at), "--crash-once")
    per_host = "2" if args.scenario == "crash" else "1"
    result = cli(
        env, "launch", str(cluster.inventory_path), "--detach", "--skip-preflight",
        "--kind", "ddp", "--gpus-per-host", per_host, *extra, "--", "example:ddp",
        "--steps", str(args.steps), "--sleep", str(args.sleep),
        *(crash if args.scenario == "crash" else ()),
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
    """Reads new lines of every job file as they appear, stamped when seen. ``lose``
    (host-lost): (the lost host's job directory, a step, the kill): once a line there
    shows that step, the host is killed; that instant is the crash."""

    def __init__(self, lose: tuple[Path, int, Callable[[], None]] | None = None) -> None:
        self.lose = lose
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
                if self.lose is not None and self.crash is None and path.parent == self.lose[0]:
                    step = STEP.search(line)
                    if step and int(step.group(1)) >= self.lose[1]:
                        self.lose[2]()  # kill the host now
                        self.crash = time.monotonic()
                        return

    def feed(self, line: str, now: float) -> None:
        if self.crash is None and "crashing at step" in line:
            self.crash = now
        resumed = RESUMED.search(line)
        if resumed and self.crash is not None and self.resumed_step is None:
            self.resumed_step = int(resumed.group(1))
        if self.resumed_step is not None and self.recovered is None and STEP.search(line):
            self.recovered = now


def job_dir(cluster: SshdCluster, host: str, job_id: str) -> Path:
    home = Path(pwd.getpwnam(cluster.host(host).user).pw_dir)
    return home / "distconsole" / ".distconsole" / "jobs" / job_id


MODE_OPTIONS = {
    "restart": ("--max-restarts", "1"),
    "elastic": ("--min-hosts", "2", "--max-restarts", "3"),
    "naive": (),
}


def run_once(
    cluster: SshdCluster, env: dict[str, str], args: argparse.Namespace, mode: str
) -> dict:
    ckpt = f"~/bench-ckpt-{mode}-{time.time_ns()}"
    extra = ("--checkpoint-dir", ckpt, *MODE_OPTIONS[mode])
    lost = args.scenario == "host-lost"
    if lost:
        for host in cluster.hosts:
            cluster.start(host.name)  # the last run killed node2
    started = time.monotonic()
    job_ids = [launch(env, cluster, args, *extra)]
    # Only the host-lost scenario has a node2 (the crash scenario's cluster has 2 hosts).
    lose = (
        (job_dir(cluster, "node2", job_ids[0]), args.crash_at, lambda: cluster.stop("node2"))
        if lost
        else None
    )
    follower = Follower(lose)
    deadline = started + 300
    while time.monotonic() < deadline:
        follower.poll([f for job in job_ids for f in job_files(cluster, job)])
        state = leader_state(cluster, job_ids[-1])
        if mode == "naive" and state == "failed" and len(job_ids) == 1:
            # The person, at once (on the hosts left when one was lost).
            survivors = ("--hosts", "node0,node1") if lost else ()
            job_ids.append(launch(env, cluster, args, *extra, *survivors))
        elif state in ("succeeded", "failed", "stopped") and (mode != "naive" or len(job_ids) == 2):
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
    parser.add_argument("--scenario", choices=("crash", "host-lost"), default="crash")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--crash-at", type=int, default=30)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--sleep", type=float, default=0.05)
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason is not None:
        raise SystemExit(f"no sshd cluster here: {reason}")
    modes = ("restart", "naive") if args.scenario == "crash" else ("elastic", "naive")
    results: dict[str, list[dict]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        cluster = SshdCluster(Path(tmp) / "cluster", 2 if args.scenario == "crash" else 3)
        env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(Path(tmp) / "data"))
        try:
            for _ in range(args.repeat):
                for mode in modes:
                    result = run_once(cluster, env, args, mode)
                    results[mode].append(result)
                    print(f"{mode:8} {json.dumps(result)}", flush=True)
        finally:
            cluster.close()
    if args.scenario == "crash":
        setup = "2 sshd hosts x 2 ranks, example:ddp, rank 1 crashes"
        what = "crash -> first step after (s), median"
    else:
        setup = "3 sshd hosts x 1 rank, example:ddp, node2 killed whole"
        what = "host lost -> first step on the others (s), median"
    print(f"\n{setup} at step {args.crash_at}, checkpoints every 5")
    print(f"{'mode':10}{what:>50}{'job wall (s)':>16}")
    medians = {}
    for mode, rows in results.items():
        times = [r["recovery_s"] for r in rows if r["recovery_s"] is not None]
        medians[mode] = statistics.median(times) if times else None
        wall = statistics.median(r["wall_s"] for r in rows)
        shown = f"{medians[mode]:.2f}" if medians[mode] is not None else "n/a"
        print(f"{mode:10}{shown:>50}{wall:>16.1f}")
    first = modes[0]
    if medians[first] and medians["naive"]:
        print(f"naive / {first}: {medians['naive'] / medians[first]:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
