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

``--scenario first-host-lost`` (issue 31): 4 sshd hosts x 1 rank, node3 the rendezvous
host (``--rendezvous-host node3``: torch's c10d store and the leader supervisor there,
no rank), training on node0..node2 with ``--min-hosts 2 --max-restarts 3``:

- first-lost: node0, the first host, killed whole (without a rendezvous host that ends
  the job);
- other-lost: node2 killed instead (the other hosts' loss, same job);
- naive: no restarts, no rendezvous host, node0 killed; relaunched on node1,node2 the
  moment the survivors' torchruns have ended (with the leader's host gone, no console
  open, nothing else says the job failed: a person watching sees their ranks end).

Each run also prints where the seconds went (``phases``): the kill -> torchrun saw its
worker fail -> the next round's workers started -> their first step.

``--baseline DIR``: the elastic modes again, launched with the distconsole of another
tree (``git archive COMMIT | tar -x -C DIR``: its plan, supervisor and store program),
in the same run, each mode named ``NAME@base``: a change's figure beside the code
before it on the same (shared, loaded) machine.

    python bench/recovery.py [--scenario crash|host-lost|first-host-lost] [--repeat 3]
                             [--crash-at 30] [--steps 60] [--sleep 0.05] [--baseline DIR]
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
from dataclasses import dataclass, replace
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "tests")]

from sshd_cluster import SshdCluster, unavailable_reason  # noqa: E402

CLI = [sys.executable, "-m", "console"]
STEP = re.compile(r"rank \d+ step (\d+)/")
RESUMED = re.compile(r"resumed from step (\d+)")


def cli(
    env: dict[str, str], *args: str, tree: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI of this tree, or of ``tree`` (its ``console`` package ahead of this one's)."""
    if tree is not None:
        env = dict(env, PYTHONPATH=os.pathsep.join([tree, env.get("PYTHONPATH", "")]))
    return subprocess.run(
        [*CLI, *args], env=env, capture_output=True, text=True, timeout=300, cwd=tree
    )


def launch(
    env: dict[str, str],
    cluster: SshdCluster,
    args: argparse.Namespace,
    *extra: str,
    tree: str | None = None,
) -> str:
    crash = ("--crash-rank", "1", "--crash-at-step", str(args.crash_at), "--crash-once")
    per_host = "2" if args.scenario == "crash" else "1"
    result = cli(
        env, "launch", str(cluster.inventory_path), "--detach", "--skip-preflight",
        "--kind", "ddp", "--gpus-per-host", per_host, *extra, "--", "example:ddp",
        "--steps", str(args.steps), "--sleep", str(args.sleep),
        *(crash if args.scenario == "crash" else ()), tree=tree,
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


def leader_state(cluster: SshdCluster, job_id: str, leader: str = "node0") -> str:
    path = job_dir(cluster, leader, job_id) / "supervisor.json"
    try:
        return str(json.loads(path.read_text()).get("state"))
    except (OSError, ValueError):
        return "starting"


def ranks_ended(cluster: SshdCluster, job_id: str, hosts: tuple[str, ...]) -> bool:
    """Every torchrun of the job on ``hosts`` has ended (its exit file is written)."""
    return all(any(job_dir(cluster, host, job_id).glob("torchrun-*.exit")) for host in hosts)


class Follower:
    """Reads new lines of every job file as they appear, stamped when seen. ``lose``
    (host-lost): (the lost host's job directory, a step, the kill): once a line there
    shows that step, the host is killed; that instant is the crash."""

    def __init__(self, lose: tuple[Path, int, Callable[[], None]] | None = None) -> None:
        self.lose = lose
        self.offsets: dict[Path, int] = {}
        self.crash: float | None = None
        self.crash_wall: float | None = None  # the same instants by the clock, to line
        self.recovered_wall: float | None = None  # them up with the hosts' logs (phases)
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
                        self.crash_wall = time.time()
                        return

    def feed(self, line: str, now: float) -> None:
        if self.crash is None and "crashing at step" in line:
            self.crash = now
            self.crash_wall = time.time() - (time.monotonic() - now)
        resumed = RESUMED.search(line)
        if resumed and self.crash is not None and self.resumed_step is None:
            self.resumed_step = int(resumed.group(1))
        if self.resumed_step is not None and self.recovered is None and STEP.search(line):
            self.recovered = now
            self.recovered_wall = time.time() - (time.monotonic() - now)


FAILED_AT = re.compile(r"^E(\d\d)(\d\d) (\d\d:\d\d:\d\d\.\d+) .*failed \(exitcode")


def phases(
    cluster: SshdCluster, job_ids: list[str], follower: Follower, host: str = "node0"
) -> dict[str, float]:
    """Where the seconds went, from a survivor's files (this machine's clock): the crash ->
    torchrun saw its worker fail (``failed (exitcode`` in its log) -> the next round's
    workers started (torchrun's newest ``attempt_N`` folder, of the relaunched job for
    the naive way) -> their first step (the follower's)."""
    if follower.crash_wall is None or follower.recovered_wall is None:
        return {}
    failed = None
    for job in job_ids:
        for path in job_dir(cluster, host, job).glob("torchrun-*.err"):
            for line in path.read_text(errors="replace").splitlines():
                found = FAILED_AT.search(line)
                if not found:
                    continue
                year = time.gmtime(follower.crash_wall).tm_year
                stamp = f"{year}-{found.group(1)}-{found.group(2)} {found.group(3)}"
                # glog's stamp is this machine's local time, as mktime reads it
                at = time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S"))
                at += float("0." + stamp.split(".")[1])
                if at >= follower.crash_wall - 5 and (failed is None or at < failed):
                    failed = at
    attempts = [
        path.stat().st_mtime
        for job in job_ids
        for path in job_dir(cluster, host, job).glob("torchrun/**/attempt_*")
    ]
    started = max(attempts, default=None)
    if failed is None or started is None or started < failed:
        return {}
    return {
        "fail_seen_s": round(failed - follower.crash_wall, 2),
        "regroup_s": round(started - failed, 2),
        "workers_s": round(follower.recovered_wall - started, 2),
    }


def job_dir(cluster: SshdCluster, host: str, job_id: str) -> Path:
    home = Path(pwd.getpwnam(cluster.host(host).user).pw_dir)
    return home / "distconsole" / ".distconsole" / "jobs" / job_id


ELASTIC = ("--min-hosts", "2", "--max-restarts", "3")
RDZV = ("--hosts", "node0,node1,node2", "--rendezvous-host", "node3", *ELASTIC)


@dataclass(frozen=True)
class Mode:
    """One way through a scenario: launch options, the host killed (None: a rank
    crashes instead), where the leader's record is, and for the naive way the hosts a
    person relaunches on."""

    options: tuple[str, ...]
    lose: str | None = None
    leader: str = "node0"
    relaunch: tuple[str, ...] = ()
    tree: str | None = None  # another tree's distconsole (--baseline)


SCENARIOS: dict[str, tuple[int, dict[str, Mode]]] = {
    "crash": (2, {"restart": Mode(("--max-restarts", "1")), "naive": Mode(())}),
    "host-lost": (
        3,
        {
            "elastic": Mode(ELASTIC, "node2"),
            "naive": Mode((), "node2", relaunch=("node0", "node1")),
        },
    ),
    "first-host-lost": (
        4,
        {
            "first-lost": Mode(RDZV, "node0", leader="node3"),
            "other-lost": Mode(RDZV, "node2", leader="node3"),
            "naive": Mode(("--hosts", "node0,node1,node2"), "node0", relaunch=("node1", "node2")),
        },
    ),
}


def run_once(
    cluster: SshdCluster, env: dict[str, str], args: argparse.Namespace, name: str, mode: Mode
) -> dict:
    ckpt = f"~/bench-ckpt-{name}-{time.time_ns()}"
    extra = ("--checkpoint-dir", ckpt, *mode.options)
    lost = mode.lose
    for host in cluster.hosts if lost else ():
        cluster.start(host.name)  # the last run killed one
    started = time.monotonic()
    job_ids = [launch(env, cluster, args, *extra, tree=mode.tree)]
    leaders = [mode.leader]
    kill = None
    if lost is not None:
        kill = (job_dir(cluster, lost, job_ids[0]), args.crash_at, lambda: cluster.stop(lost))
    follower = Follower(kill)
    trained = tuple(f"node{i}" for i in range(3 if len(cluster.hosts) == 4 else len(cluster.hosts)))
    survivors = tuple(h for h in trained if h != lost)
    deadline = started + 300
    while time.monotonic() < deadline:
        follower.poll([f for job in job_ids for f in job_files(cluster, job)])
        state = leader_state(cluster, job_ids[-1], leaders[-1])
        if name == "naive" and len(job_ids) == 1:
            # The person, at once (on the hosts left when one was lost).
            ended = lost == "node0" and ranks_ended(cluster, job_ids[0], survivors)
            if state == "failed" or ended:
                hosts = ("--hosts", ",".join(mode.relaunch)) if mode.relaunch else ()
                job_ids.append(launch(env, cluster, args, *extra, *hosts))
                leaders.append(mode.relaunch[0] if mode.relaunch else mode.leader)
        elif state in ("succeeded", "failed", "stopped"):
            follower.poll([f for job in job_ids for f in job_files(cluster, job)])
            break
        time.sleep(0.02)
    return {
        "state": leader_state(cluster, job_ids[-1], leaders[-1]),
        "recovery_s": (follower.recovered - follower.crash)
        if follower.recovered is not None and follower.crash is not None
        else None,
        "resumed_from": follower.resumed_step,
        "wall_s": time.monotonic() - started,
        **phases(cluster, job_ids, follower, survivors[0]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scenario", choices=tuple(SCENARIOS), default="crash")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--crash-at", type=int, default=30)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--sleep", type=float, default=0.05)
    parser.add_argument("--baseline", help="another tree's distconsole, its modes beside")
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason is not None:
        raise SystemExit(f"no sshd cluster here: {reason}")
    size, modes = SCENARIOS[args.scenario]
    if args.baseline:
        base = str(Path(args.baseline).resolve())
        modes = {**modes, **{f"{n}@base": replace(m, tree=base) for n, m in modes.items()
                             if n != "naive"}}  # fmt: skip
    results: dict[str, list[dict]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        cluster = SshdCluster(Path(tmp) / "cluster", size)
        env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(Path(tmp) / "data"))
        try:
            for _ in range(args.repeat):
                for name, mode in modes.items():
                    result = run_once(cluster, env, args, name, mode)
                    results[name].append(result)
                    print(f"{name:10} {json.dumps(result)}", flush=True)
        finally:
            cluster.close()
    if args.scenario == "crash":
        setup = "2 sshd hosts x 2 ranks, example:ddp, rank 1 crashes"
        what = "crash -> first step after (s), median"
    elif args.scenario == "host-lost":
        setup = "3 sshd hosts x 1 rank, example:ddp, node2 killed whole"
        what = "host lost -> first step on the others (s), median"
    else:
        setup = "4 sshd hosts, node3 the rendezvous host, ddp on node0..2 x 1 rank, one killed"
        what = "host lost -> first step on the others (s), median"
    print(f"\n{setup} at step {args.crash_at}, checkpoints every 5")
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} (at the end)")
    print(f"{'mode':12}{what:>50}{'job wall (s)':>16}")
    medians: dict[str, float | None] = {}
    for label, rows in results.items():
        times = [r["recovery_s"] for r in rows if r["recovery_s"] is not None]
        medians[label] = statistics.median(times) if times else None
        wall = statistics.median(r["wall_s"] for r in rows)
        shown = f"{medians[label]:.2f}" if medians[label] is not None else "n/a"
        print(f"{label:12}{shown:>50}{wall:>16.1f}")
    naive = medians["naive"]
    for first in (m for m in modes if m != "naive"):
        took = medians[first]
        if took and naive:
            print(f"naive / {first}: {naive / took:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
