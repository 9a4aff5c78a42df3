"""`distconsole gpus --json` against `pdsh` + nvidia-smi on the same real sshd hosts.

N real OpenSSH sshd hosts on loopback (``tests/sshd_cluster.py`` with one shared
account, so up to 240 hosts; needs root, like the tests), each answering nvidia-smi with
the GPU STAND-IN (``tests/standin/nvidia-smi``, a real captured H200: this machine has
no GPU). For each N, in one run, alternating:

- ``distconsole gpus --json HOSTS`` (connect to every host, start one sampler each,
  wait for every host's first sample with its host figures, print, exit);
- the naive way people use today: ``pdsh -R ssh -f F -w HOSTS`` running the two
  nvidia-smi queries the sampler makes (``--query-gpu`` with the same fields, then
  ``--query-compute-apps``), through OpenSSH's ``ssh`` with an ``ssh_config`` naming
  each host's port, user, key and known_hosts (``-F``); ``install pdsh`` (apt) first.

Both are separate processes started by this script; "console CPU" is the CPU time of
that process and everything it waited for on the console side (pdsh's ssh clients
included: ``RUSAGE_CHILDREN``), never the hosts' sshd, shells, samplers or
nvidia-smi, which here share this machine's 2 cores with the console but on a real
cluster run on the hosts. Wall time is to the process's exit; both print every host.

    python bench/gpus_cli.py [--hosts 1,64] [--repeat 3] [--fanout 64] [--timeline 5]

``--timeline RUNS``: the smallest N's run again through ``bench/gpus_timeline.py``, which
notes the time and the console's CPU at each step (python up, imports, inventory,
connected, session opened, the sampler's hello and sample, JSON written, exit).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from common import fmt, host_counts, positive_int, print_header  # noqa: E402

from console.hostprogs.sampler.schema import QUERY_APPS, query_gpu  # noqa: E402

PYTHON = sys.executable


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(
    cmd: list[str], env: dict[str, str] | None = None, allowed: tuple[int, ...] = (0,)
) -> tuple[float, float, str]:
    """(wall s, CPU s of the process and the children it waited for, stdout);
    ``allowed``: the exit statuses that still count as a run."""
    cpu0, t0 = children_cpu_s(), time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    wall, cpu = time.perf_counter() - t0, children_cpu_s() - cpu0
    if done.returncode not in allowed:
        raise SystemExit(f"{cmd[0]} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, cpu, done.stdout


def nvsmi_commands(standin: Path) -> str:
    gpu = ",".join(query_gpu())
    apps = ",".join(QUERY_APPS)
    fmt_ = "--format=csv,noheader,nounits"
    return (
        f"export PATH={standin}:$PATH; nvidia-smi --query-gpu={gpu} {fmt_}; "
        f"nvidia-smi --query-compute-apps={apps} {fmt_}"
    )


def ssh_config(cluster: Any, path: Path) -> Path:
    lines = []
    for host in cluster.hosts:
        lines += [
            f"Host {host.name}",
            f"  HostName {host.address}",
            f"  Port {host.port}",
            f"  User {host.user}",
            f"  IdentityFile {cluster.client_key_path}",
            "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {cluster.known_hosts_path}",
            "  StrictHostKeyChecking yes",
            "  BatchMode yes",
            "  LogLevel ERROR",
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_inventory(cluster: Any, count: int, standin: Path, work: Path) -> Path:
    """The cluster's inventory with the product's connect_timeout (10 s), not the tests'
    3 s: pdsh's ssh waits as long as a handshake takes, and at load 20-40 here a 3 s
    bound left half of the 64 hosts unanswered."""
    from console.inventory import Host

    return Path(
        cluster.write_inventory(
            work / f"hosts{count}.yaml",
            setup=f"export PATH={standin}:$PATH",
            connect_timeout=Host.model_fields["connect_timeout"].default,
        )
    )


def run_pair(cluster: Any, count: int, fanout: int, standin: Path, work: Path) -> dict[str, Any]:
    names = [h.name for h in cluster.hosts[:count]]
    inventory = write_inventory(cluster, count, standin, work)
    load = os.getloadavg()[0]
    # The inventory lists every host of the cluster; --host picks the first ``count``.
    gpus_cmd = [PYTHON, "-m", "console", "gpus", "--json", str(inventory)]
    for name in names:
        gpus_cmd += ["--host", name]
    # Status 1: a host gave no sample in time (a loaded machine): its JSON still says
    # which, and the "answered" column shows it, instead of ending the whole bench.
    wall, cpu, out = timed(gpus_cmd, allowed=(0, 1))
    views = json.loads(out)
    sampled = sum(1 for v in views if v["gpus"])
    config = ssh_config(cluster, work / "ssh_config")
    env = dict(os.environ, PDSH_SSH_ARGS=f"-F {config} %h", PDSH_RCMD_TYPE="ssh")
    pdsh_cmd = ["pdsh", "-R", "ssh", "-f", str(fanout), "-w", ",".join(names)]
    pdsh_cmd.append(nvsmi_commands(standin))
    p_wall, p_cpu, p_out = timed(pdsh_cmd, env)
    answered = {line.split(":", 1)[0] for line in p_out.splitlines() if ":" in line}
    # The console's own start: the gpus command's imports and parser, no host contacted.
    start_wall, start_cpu, _ = timed([PYTHON, "-m", "console", "gpus", "--help"])
    return {
        "load": load,
        "start_wall": start_wall,
        "start_cpu": start_cpu,
        "gpus_wall": wall,
        "gpus_cpu": cpu,
        "gpus_sampled": sampled,
        "pdsh_wall": p_wall,
        "pdsh_cpu": p_cpu,
        "pdsh_hosts": len(answered & set(names)),
    }


def timeline_runs(cluster: Any, count: int, repeat: int, standin: Path, work: Path) -> list[Any]:
    """``gpus --json`` on the first ``count`` hosts through ``bench/gpus_timeline.py``
    (the time and console CPU at each step), ``repeat`` times: one dict per run."""
    names = [h.name for h in cluster.hosts[:count]]
    inventory = write_inventory(cluster, count, standin, work)
    runs = []
    for _ in range(repeat):
        cmd = [PYTHON, str(ROOT / "bench" / "gpus_timeline.py"), repr(time.time())]
        cmd += [str(inventory), *(w for n in names for w in ("--host", n))]
        wall, cpu, out = timed(cmd)
        run = json.loads(out.strip().splitlines()[-1])
        run["exit"] = (wall, cpu)
        runs.append(run)
    return runs


def _print_timeline(count: int, runs: list[Any], repeat: int) -> None:
    print(
        f"\ntimeline of gpus --json on {count} host(s), from starting the process (median of "
        f"{len(runs)}; with several hosts, when the LAST host reached the step); CPU: the "
        "console process's own"
    )
    print_header(f"{'step':<40}  {'at':>8}  {'step took':>9}  {'console CPU':>11}")
    previous = 0.0
    for step in runs[0]["steps"]:
        at = statistics.median(r["steps"][step][-1][0] for r in runs)
        cpu = statistics.median(r["steps"][step][-1][1] for r in runs)
        print(f"{step:<40}  {at * 1000:>5.0f} ms  {(at - previous) * 1000:>6.0f} ms  "
              f"{cpu * 1000:>8.0f} ms")  # fmt: skip
        previous = at
    wall = statistics.median(r["exit"][0] for r in runs)
    cpu = statistics.median(r["exit"][1] for r in runs)
    print(f"{'process exited (interpreter teardown)':<40}  {wall * 1000:>5.0f} ms  "
          f"{(wall - previous) * 1000:>6.0f} ms  {cpu * 1000:>8.0f} ms")  # fmt: skip
    print(f"command: python bench/gpus_cli.py --hosts {count} --timeline {repeat}")


def demo_runs(count: int, repeat: int) -> list[tuple[float, float, int, float]]:
    """``gpus --json`` on ``count`` demo hosts (8 simulated GPUs each) served by a separate
    ``distconsole demo --serve`` process: (wall s, console CPU s, hosts with GPUs, the
    demo hosts' CPU s)."""
    from common import GPUS_PER_HOST, demo_cluster, tree_cpu_s
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    runs = []
    with (
        demo_cluster(count, "bench/gpus_cli.py") as (servers, served),
        tempfile.TemporaryDirectory(prefix="bench-gpus-demo-") as tmp,
    ):
        data = yaml.load(served.read_text())
        data["defaults"]["gpus"] = GPUS_PER_HOST
        inventory = Path(tmp) / "hosts.yaml"
        with inventory.open("w") as handle:
            yaml.dump(data, handle)
        for _ in range(repeat):
            hosts0 = tree_cpu_s(servers.pids)
            wall, cpu, out = timed([PYTHON, "-m", "console", "gpus", "--json", str(inventory)])
            hosts_cpu = tree_cpu_s(servers.pids) - hosts0
            runs.append((wall, cpu, sum(1 for v in json.loads(out) if v["gpus"]), hosts_cpu))
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=host_counts("1,64", 240), default=[1, 64])
    parser.add_argument("--repeat", type=positive_int, default=3, help="runs per N (median)")
    parser.add_argument("--fanout", type=positive_int, default=64, help="pdsh -f")
    parser.add_argument(
        "--demo",
        type=host_counts("256", 256),
        default=[],
        help="also time gpus --json alone on these numbers of demo hosts (8 simulated GPUs "
        "each, served by a separate process; no pdsh there)",
    )
    parser.add_argument("--no-sshd", action="store_true", help="only the --demo runs")
    parser.add_argument(
        "--timeline",
        type=int,
        default=0,
        metavar="RUNS",
        help="also time each step of gpus --json (python up, imports, inventory, connect, "
        "session, hello, sample, JSON, exit) on the smallest --hosts count, RUNS times",
    )
    args = parser.parse_args(argv)
    demo = {n: demo_runs(n, args.repeat) for n in args.demo}
    if args.no_sshd:
        _print_demo(demo, args)
        return 0
    if os.geteuid() != 0:
        raise SystemExit("bench/gpus_cli.py starts real sshd hosts: run it as root")
    if shutil.which("pdsh") is None:
        raise SystemExit(
            "bench/gpus_cli.py compares with pdsh: install pdsh (apt-get install pdsh)"
        )
    from gpu_standin import readable_standin_dir
    from sshd_cluster import SshdCluster

    standin = readable_standin_dir()
    with tempfile.TemporaryDirectory(prefix="bench-gpus-") as tmp:
        work = Path(tmp)
        work.chmod(0o755)
        cluster = SshdCluster(work / "cluster", max(args.hosts), shared_account=True)
        try:
            load1, load5, _ = os.getloadavg()
            print(
                f"gpus --json vs pdsh: {max(args.hosts)} real sshd hosts on loopback (one "
                f"account), nvidia-smi = GPU STAND-IN replaying a captured H200; pdsh -f "
                f"{args.fanout}; {args.repeat} run(s) per N, alternating (median); "
                f"{os.cpu_count()} CPUs, load average {load1:.2f} / {load5:.2f}",
                flush=True,
            )
            results = {
                n: [run_pair(cluster, n, args.fanout, standin, work) for _ in range(args.repeat)]
                for n in args.hosts
            }
            first = min(args.hosts)
            timeline = timeline_runs(cluster, first, args.timeline, standin, work)
        finally:
            cluster.close()
    _print(results, args)
    if timeline:
        _print_timeline(first, timeline, args.timeline)
    _print_demo(demo, args)
    return 0


def _print_demo(
    demo: dict[int, list[tuple[float, float, int, float]]], args: argparse.Namespace
) -> None:
    if not demo:
        return
    print("\ngpus --json on demo hosts (embedded SSH servers + simulated GPUs, separate process)")
    print_header(
        f"{'hosts':>5}  {'wall':>7}  {'console CPU':>11}  {'hosts CPU':>9}  {'floor':>7}  "
        f"{'with GPUs':>9}"
    )
    cores = os.cpu_count() or 1
    for n, runs in demo.items():
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        hosts = statistics.median(r[3] for r in runs)
        floor = max(cpu, (cpu + hosts) / cores)
        print(f"{n:>5}  {wall:>5.2f} s  {cpu:>9.2f} s  {hosts:>7.2f} s  {floor:>5.2f} s  "
              f"{min(r[2] for r in runs):>9}")  # fmt: skip
    print(
        f"floor: the wall time this machine cannot beat, the console's and the hosts' CPU "
        f"over its {cores} cores (on a real cluster each host's share runs on its own cores)"
    )
    print("target: 256 hosts <= 2 s")
    print(f"command: python bench/gpus_cli.py --no-sshd --demo {','.join(map(str, demo))} "
          f"--repeat {args.repeat}")  # fmt: skip


def _print(results: dict[int, list[dict[str, Any]]], args: argparse.Namespace) -> None:
    def med(runs: list[dict[str, Any]], key: str) -> float:
        return float(statistics.median(r[key] for r in runs))

    header = (
        f"{'hosts':>5}  {'gpus --json wall':>16}  {'console CPU':>11}  {'pdsh wall':>9}  "
        f"{'pdsh CPU':>8}  {'wall ratio':>10}  {'CPU ratio':>9}  {'answered':>13}  {'load':>9}"
    )
    print()
    print_header(header)
    for n, runs in results.items():
        gw, gc, pw, pc = (med(runs, k) for k in ("gpus_wall", "gpus_cpu", "pdsh_wall", "pdsh_cpu"))
        answered = f"{min(r['gpus_sampled'] for r in runs)}/{min(r['pdsh_hosts'] for r in runs)}"
        wall_ratio = fmt(pw / gw if gw else None, ".2f")
        cpu_ratio = fmt(pc / gc if gc else None, ".1f")
        loads = f"{min(r['load'] for r in runs):.1f}-{max(r['load'] for r in runs):.1f}"
        print(
            f"{n:>5}  {gw:>14.2f} s  {gc:>9.2f} s  {pw:>7.2f} s  {pc:>6.2f} s  "
            f"{wall_ratio:>9}x  {cpu_ratio:>8}x  {answered:>13}  {loads:>9}"
        )
    starts = [r for runs in results.values() for r in runs]
    print(
        f"of which the console's own start (python -m console gpus --help: the command's "
        "imports but asyncssh's, no host; --timeline has every step): "
        f"{med(starts, 'start_wall'):.2f} s wall, {med(starts, 'start_cpu'):.2f} s CPU"
    )
    print(
        "wall ratio: pdsh / gpus (> 1: gpus is faster); CPU ratio: pdsh's console-side CPU "
        "(pdsh + its ssh clients) / gpus's; answered: hosts with GPUs in gpus' JSON / hosts "
        "that answered pdsh; load: the 1-minute load average before each gpus run (this "
        "machine's other work shares its cores with both)"
    )
    print("targets: gpus --json faster in wall time, >= 5x less console CPU")
    print(f"command: python bench/gpus_cli.py --hosts {','.join(map(str, results))} "
          f"--repeat {args.repeat} --fanout {args.fanout}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
