"""Crash detection latency and supervisor CPU: the host supervisors vs console-side polling.

Two "hosts" on this machine (two job directories; the supervisors talk TCP on loopback
as they would on a training network), each running ``--procs`` plain Python loops
started by the real ``jobctl start``; one process exits 3 after ``--crash-after`` s.

- supervised: ``jobctl start`` with the supervisor (console/hostprogs/supervisor/program.py);
  latency = the crashed process's exit file -> no process of the job left anywhere;
- naive (today's console-side way): one ``jobctl watch`` per host read by this process,
  which runs ``jobctl stop`` on every host when it sees a non-zero exit.
- CPU: each supervisor's CPU time over ``--cpu-seconds`` (>= 20) of a running job,
  measured with psutil, as % of one core; against one ``jobctl watch`` per host.
- hang: every process prints a step line every 0.2 s, then goes quiet (alive) after
  ``--quiet-after`` s; latency = the last line written -> the leader's supervisor.json
  reads hung, with ``--hang-timeout`` S (so S plus the detection's own delay). The naive
  way has no hang check: NCCL's watchdog aborts after its default 600 s (gloo: never);
  that figure is NCCL's documented default, not measured here (no GPU).

    python bench/supervisor.py [--procs 4] [--crash-after 3] [--cpu-seconds 20]
                               [--hang-timeout 5] [--quiet-after 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from console.hostprogs.supervisor.source import supervisor_source
from console.jobs.ssh.remote_ops import jobctl_source

LOOP = "import time\nwhile True: time.sleep(0.2)"


def wrapper(job_dir: Path, name: str, job_id: str, crash_after: float | None) -> str:
    code = f"import sys, time; time.sleep({crash_after}); sys.exit(3)" if crash_after else LOOP
    exit_file = shlex.quote(str(job_dir / f"{name}.exit"))
    return (
        "trap 'x=1' TERM\n"
        f"export DISTCONSOLE_JOB_ID={job_id}\n"
        f"python3 -c {shlex.quote(code)}\n"
        f"s=$?; echo $s > {exit_file}.tmp && mv {exit_file}.tmp {exit_file}\n"
    )


def printing_wrapper(job_dir: Path, name: str, job_id: str, quiet_after: float) -> str:
    """A process that prints a step every 0.2 s into NAME.out, then only sleeps."""
    code = (
        "import time\nstart = time.time()\nstep = 0\nwhile True:\n"
        f"    if time.time() - start < {quiet_after}:\n"
        "        step += 1\n        print('step', step, flush=True)\n"
        "    time.sleep(0.2)\n"
    )
    out = shlex.quote(str(job_dir / f"{name}.out"))
    return f"export DISTCONSOLE_JOB_ID={job_id}\nexec python3 -c {shlex.quote(code)} >{out} 2>&1\n"


def jobctl(op: str, args: dict, stdin: str = "") -> dict:
    out = subprocess.run(
        [sys.executable, "-u", "-c", jobctl_source(), op, json.dumps(args)],
        input=stdin, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return json.loads(out.splitlines()[-1])


def start(
    root: Path,
    job_id: str,
    n: int,
    crash_after: float,
    supervised: bool,
    hang_timeout: float | None = None,
    quiet_after: float | None = None,
) -> list[Path]:
    hosts = ["h0", "h1"]
    dirs = [root / job_id / h for h in hosts]
    procs: list[dict[str, Any]] = [
        {"host": h, "name": f"rank-{i}", "role": "rank", "ranks": [hosts.index(h) * n + i]}
        for h in hosts for i in range(n)
    ]  # fmt: skip
    port = None
    for host, job_dir in zip(hosts, dirs, strict=True):
        payload: dict = {
            "job_dir": str(job_dir), "uploads": [], "dirs": [],
            "processes": [
                {"name": p["name"], "script": wrapper(
                    job_dir, p["name"], job_id,
                    crash_after if (host, p["name"]) == ("h1", "rank-0") else None)
                    if quiet_after is None
                    else printing_wrapper(job_dir, p["name"], job_id, quiet_after)}
                for p in procs if p["host"] == host
            ],
        }  # fmt: skip
        if supervised:
            config = {
                "job_id": job_id, "host": host, "leader": "h0", "leader_address": "127.0.0.1",
                "leader_port": port, "kind": "ddp", "fail_fast": True, "grace": 5.0,
                "heartbeat_s": 1.0, "silence_s": 4.0, "poll_s": 0.25, "hang_timeout": hang_timeout,
                "stop_on_hang": False,
                "processes": [dict(p, logs=[]) for p in procs],
            }  # fmt: skip
            payload["supervisor"] = {"config": config, "secret": "ab" * 32,
                                     "source": supervisor_source()}  # fmt: skip
        result = jobctl("start", {}, json.dumps(payload))
        port = port or (result.get("supervisor") or {}).get("port")
    return dirs


def job_left(job_id: str) -> int:
    marker = f"DISTCONSOLE_JOB_ID={job_id}".encode()
    left = 0
    for proc in psutil.process_iter():
        try:
            environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        except OSError:
            continue
        left += marker in environ.split(b"\0")
    return left


def crash_latency(root: Path, n: int, crash_after: float, supervised: bool) -> float:
    job_id = f"bench-{'sup' if supervised else 'naive'}-{os.getpid()}-{time.time_ns()}"
    dirs = start(root, job_id, n, crash_after, supervised)
    crashed = dirs[1] / "rank-0.exit"
    watchers = []
    if not supervised:
        for d in dirs:
            args = {"job_dir": str(d), "names": [f"rank-{i}" for i in range(n)], "interval": 0.2}
            watchers.append(subprocess.Popen(
                [sys.executable, "-u", "-c", jobctl_source(), "watch", json.dumps(args)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))  # fmt: skip
        watcher = watchers[1]
        assert watcher.stdout is not None
        for line in watcher.stdout:
            record = json.loads(line)
            if record.get("exit") not in (None, 0):
                break
        for d in dirs:
            jobctl("stop", {"job_dir": str(d), "job_id": job_id, "grace": 5.0, "names": []})
    while job_left(job_id):
        time.sleep(0.02)
    gone = time.time()
    for w in watchers:
        w.kill()
    return gone - crashed.stat().st_mtime


def hang_latency(root: Path, n: int, timeout: float, quiet_after: float) -> float:
    """Last line written -> the leader's supervisor.json reads hung."""
    job_id = f"bench-hang-{os.getpid()}-{time.time_ns()}"
    dirs = start(root, job_id, n, 0, True, hang_timeout=timeout, quiet_after=quiet_after)
    leader = dirs[0] / "supervisor.json"
    deadline = time.monotonic() + quiet_after + timeout + 60
    state: dict = {}
    while state.get("state") != "hung":
        assert time.monotonic() < deadline, f"never hung: {state}"
        time.sleep(0.05)
        try:
            state = json.loads(leader.read_text())
        except (OSError, ValueError):
            continue
    last = max(p.stat().st_mtime for d in dirs for p in d.glob("*.out"))
    for d in dirs:
        jobctl("stop", {"job_dir": str(d), "job_id": job_id, "grace": 3.0, "names": []})
    return float(state["hang"]["at"]) - last


def cpu_percent(pids: list[int], seconds: float) -> list[float]:
    procs = [psutil.Process(p) for p in pids]
    before = [sum(p.cpu_times()[:2]) for p in procs]
    time.sleep(seconds)
    return [
        100 * (sum(p.cpu_times()[:2]) - b) / seconds for p, b in zip(procs, before, strict=True)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=4, help="processes per host")
    parser.add_argument("--crash-after", type=float, default=3.0)
    parser.add_argument("--cpu-seconds", type=float, default=20.0)
    parser.add_argument("--hang-timeout", type=float, default=5.0)
    parser.add_argument("--quiet-after", type=float, default=2.0)
    args = parser.parse_args()
    command = "python bench/supervisor.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sup = crash_latency(root, args.procs, args.crash_after, supervised=True)
        naive = crash_latency(root, args.procs, args.crash_after, supervised=False)
        hang = hang_latency(root, args.procs, args.hang_timeout, args.quiet_after)
        job_id = f"bench-cpu-{os.getpid()}"
        # Hang detection on, as every launch has it by default (its progress check runs
        # on every poll).
        dirs = start(root, job_id, args.procs, 0, supervised=True, hang_timeout=300.0)
        time.sleep(1)
        # A follower's files carry its host's name (h0 leads).
        pids = [
            int((d / ("supervisor.pid" if i == 0 else f"supervisor.h{i}.pid")).read_text())
            for i, d in enumerate(dirs)
        ]
        sup_cpu = cpu_percent(pids, args.cpu_seconds)
        watch_args = {"job_dir": str(dirs[0]), "names": [f"rank-{i}" for i in range(args.procs)]}
        watch = subprocess.Popen(
            [sys.executable, "-u", "-c", jobctl_source(), "watch", json.dumps(watch_args)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)  # fmt: skip
        time.sleep(1)
        naive_cpu = cpu_percent([watch.pid], args.cpu_seconds)[0]
        watch.kill()
        for d in dirs:
            jobctl("stop", {"job_dir": str(d), "job_id": job_id, "grace": 3.0, "names": []})
    print(f"$ {command}")
    print(f"crash -> every process gone, 2 hosts x {args.procs} processes:")
    print(f"  supervisors          {sup:6.2f} s")
    print(f"  console-side polling {naive:6.2f} s   (ratio naive/supervised {naive / sup:.2f}x)")
    print(f"CPU per host over {args.cpu_seconds:.0f} s (% of one core):")
    print("  supervisor           " + ", ".join(f"{c:.3f} %" for c in sup_cpu))
    print(f"  jobctl watch (naive) {naive_cpu:.3f} %")
    print(
        f"hang -> hung recorded (last output -> leader's supervisor.json), 2 hosts x {args.procs}:"
    )
    print(
        f"  supervisors          {hang:6.2f} s   (--hang-timeout {args.hang_timeout:g}: "
        f"{hang - args.hang_timeout:.2f} s past the timeout)"
    )
    print(
        f"  NCCL watchdog        {600:6.0f} s   (its default, not measured; gloo: never; "
        f"ratio {600 / hang:.0f}x)"
    )


if __name__ == "__main__":
    main()
