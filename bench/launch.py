"""How long the runner takes to start a job on N hosts, and to stop it: vs a naive loop.

The hosts are an embedded demo cluster served by a separate process
(``distconsole demo --serve``). The program is trivial (``touch`` a marker, then
``sleep``) so that what is measured is the launcher's own cost. For each N it prints
the median of ``--repeat`` runs of:

- start: from ``JobRunner.launch(plan)`` being called until every process has touched
  its marker file (checked on this machine: the demo hosts' files are local);
- stop: from ``JobRunner.stop(job)`` being called until it returns, which is after
  every host verified that no process of the job is left (also checked here);
- naive: the same with one ``ssh`` per host, one host after the other
  (``setsid nohup ... &`` to start, ``pkill -f`` to stop), as hand-written scripts do;

plus the ratio naive / runner. Connections are opened before timing (the console keeps
them open); the naive ``ssh`` pays a handshake per host, as it does in real life.

    python bench/launch.py [--hosts 2,8,16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil
from common import demo_cluster, host_counts, positive_int

from console.inventory import Host, Inventory, load
from console.jobs import paths
from console.jobs.history import JobHistory
from console.jobs.models import JobKind, JobPlan, LogFile, RankLaunch
from console.jobs.ssh.runner import JobRunner
from console.transport.pool import ClusterConnections

TARGET_START_S = 1.0
TARGET_STOP_S = 3.0
WAIT_LIMIT_S = 60.0

_host_counts = host_counts("2,8,16", 64)


def trivial_plan(hosts: Sequence[Host], job_id: str) -> JobPlan:
    """One process per host: touch a marker, then sleep until stopped."""
    launches = []
    job_dirs = {}
    for index, host in enumerate(hosts):
        job_dir = paths.job_dir(host.work_dir, job_id)
        job_dirs[host.name] = job_dir
        launches.append(
            RankLaunch(
                host=host.name,
                role="rank",
                index=index,
                argv=("sh", "-c", f"touch {shlex.quote(job_dir)}/up; exec sleep 600"),
                env={"DISTCONSOLE_JOB_ID": job_id},
                cwd=host.work_dir,
                log_paths=(
                    LogFile(paths.process_stdout(job_dir, "rank", index), "stdout", "task"),
                    LogFile(paths.process_stderr(job_dir, "rank", index), "stderr", "task"),
                ),
                ranks=(index,),
            )
        )
    return JobPlan(
        job_id=job_id,
        name="bench",
        kind=JobKind.MPI,
        world_size=len(hosts),
        launches=tuple(launches),
        job_dirs=job_dirs,
        hosts_involved=tuple(h.name for h in hosts),
        fail_fast=False,
    )


async def wait_until(predicate: object, what: str) -> None:
    assert callable(predicate)
    deadline = time.perf_counter() + WAIT_LIMIT_S
    while not predicate():
        if time.perf_counter() > deadline:
            raise SystemExit(f"bench/launch.py: {what} did not happen within {WAIT_LIMIT_S}s")
        await asyncio.sleep(0.005)


def markers_present(dirs: Sequence[str]) -> bool:
    return all(os.path.exists(f"{d}/up") for d in dirs)


def job_processes(token: str) -> list[int]:
    """Local processes whose command line carries ``token`` (the demo hosts are local)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if any(token in part for part in cmdline) and "pkill" not in cmdline[:1]:
            found.append(proc.pid)
    return found


def marked_processes(job_id: str) -> list[int]:
    """Local processes of the job: they carry its marker variable (the runner's own
    helpers, such as the watcher finishing, do not)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("DISTCONSOLE_JOB_ID") == job_id:
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


async def time_runner(runner: JobRunner, hosts: Sequence[Host]) -> tuple[float, float]:
    job_id = paths.new_job_id("bench")
    plan = trivial_plan(hosts, job_id)
    started = time.perf_counter()
    job = await runner.launch(plan)
    await wait_until(lambda: markers_present(list(plan.job_dirs.values())), "every rank up")
    start_s = time.perf_counter() - started
    started = time.perf_counter()
    report = await runner.stop(job, grace_s=5.0)
    stop_s = time.perf_counter() - started
    if not report.clean or marked_processes(job_id):
        raise SystemExit(f"bench/launch.py: the runner left processes: {report.describe()}")
    return start_s, stop_s


def ssh_argv(host: Host, command: str) -> list[str]:
    return [
        "ssh", "-n", "-p", str(host.port), "-i", str(host.identity_file),
        "-o", f"UserKnownHostsFile={host.known_hosts}", "-o", "StrictHostKeyChecking=yes",
        "-o", "BatchMode=yes", f"{host.user}@{host.address}", command,
    ]  # fmt: skip


async def time_naive(hosts: Sequence[Host]) -> tuple[float, float]:
    token = paths.new_job_id("naive")
    dirs = [paths.job_dir(h.work_dir, token) for h in hosts]
    started = time.perf_counter()
    for host, job_dir in zip(hosts, dirs, strict=True):
        script = (
            f"mkdir -p {shlex.quote(job_dir)} && cd {shlex.quote(job_dir)} && "
            f"{{ setsid nohup sh -c 'touch up; exec sleep 600 # {token}' "
            "</dev/null >out 2>&1 & }"
        )
        await asyncio.to_thread(subprocess.run, ssh_argv(host, script), check=True)
    await wait_until(lambda: markers_present(dirs), "every naive rank up")
    start_s = time.perf_counter() - started
    started = time.perf_counter()
    for host in hosts:
        # "[n]aive-..." matches the job but not this command line itself
        stop = f"pkill -TERM -f {shlex.quote('[' + token[0] + ']' + token[1:])}; true"
        await asyncio.to_thread(subprocess.run, ssh_argv(host, stop), check=True)
    await wait_until(lambda: not job_processes(token), "every naive process gone")
    stop_s = time.perf_counter() - started
    return start_s, stop_s


async def measure(inventory: Inventory, counts: Sequence[int], repeat: int, data: Path) -> None:
    pool = ClusterConnections(inventory)
    await pool.wait_settled()
    runner = JobRunner(pool, inventory, history=JobHistory(data / "jobs.sqlite3"))
    try:
        await time_runner(runner, inventory.hosts[:1])  # warm-up: imports, first channels
        print(
            f"{'hosts':>5}  {'start s':>8}  {'naive start s':>13}  {'ratio':>6}  "
            f"{'stop s':>7}  {'naive stop s':>12}  {'ratio':>6}  "
            f"targets (start<={TARGET_START_S:g}s, stop<={TARGET_STOP_S:g}s)"
        )
        for count in counts:
            chosen = inventory.hosts[:count]
            runs = [await time_runner(runner, chosen) for _ in range(repeat)]
            naive = [await time_naive(chosen) for _ in range(repeat)]
            start_s = statistics.median(r[0] for r in runs)
            stop_s = statistics.median(r[1] for r in runs)
            naive_start = statistics.median(r[0] for r in naive)
            naive_stop = statistics.median(r[1] for r in naive)
            met = "met" if start_s <= TARGET_START_S and stop_s <= TARGET_STOP_S else "MISSED"
            print(
                f"{count:>5}  {start_s:>8.3f}  {naive_start:>13.3f}  "
                f"{naive_start / start_s:>5.1f}x  {stop_s:>7.3f}  {naive_stop:>12.3f}  "
                f"{naive_stop / stop_s:>5.1f}x  {met}",
                flush=True,
            )
    finally:
        await runner.close()
        await pool.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--hosts", type=_host_counts, default=[2, 8, 16], metavar="N,N,..")
    parser.add_argument("--repeat", type=positive_int, default=3, metavar="R")
    args = parser.parse_args(argv)
    with demo_cluster(max(args.hosts), "bench/launch.py") as (proc, inventory_path):
        inventory = load(inventory_path)
        print(
            f"launch bench: {max(args.hosts)} demo hosts served by pid {proc.pid} on 127.0.0.1; "
            f"median of {args.repeat}; {os.cpu_count()} CPUs"
        )
        with tempfile.TemporaryDirectory() as data:
            asyncio.run(measure(inventory, args.hosts, args.repeat, Path(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
