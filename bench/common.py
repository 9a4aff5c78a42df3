"""Pieces every benchmark uses: option parsers, the demo cluster served by a separate
process, worker processes answering one JSON line, CPU / RSS readings, table cells.

The scripts are run as ``python bench/X.py``, so Python puts this folder first on
``sys.path`` and ``import common`` finds this module as a sibling.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parents[1]
# Measure this checkout's package, not the one an editable install points at (another
# checkout's, after a `pip install -e` there).
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from console.inventory import Inventory, load  # noqa: E402
from console.transport.demo import MAX_DEMO_HOSTS  # noqa: E402

# Simulated GPUs per demo host in the GPU benchmarks (the DGX-like shape).
GPUS_PER_HOST = 8


def host_counts(example: str, maximum: int) -> Callable[[str], list[int]]:
    """An argparse type for a list of host counts like ``example``, each 1..maximum."""

    def parse(text: str) -> list[int]:
        try:
            counts = [int(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a list like {example}: {text!r}") from None
        if not counts or any(not 1 <= n <= maximum for n in counts):
            raise argparse.ArgumentTypeError(f"each count must be between 1 and {maximum}")
        return counts

    return parse


# --hosts of the demo-cluster benchmarks.
demo_host_counts = host_counts("8,32,64", MAX_DEMO_HOSTS)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def cpu_s() -> float:
    """CPU seconds (user + system) this process has used."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def tree_cpu_s(pids: Sequence[int]) -> float:
    """CPU seconds of processes and their descendants: the live ones' own, plus what each
    has from the children it reaped (the demo hosts' samplers and commands that ended)."""
    total = 0.0
    procs = []
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs += [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def rss_mb() -> float:
    """This process's resident memory now, MiB (peak_rss_mib is the high-water mark)."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def gpu_inventory(path: Path, count: int) -> Inventory:
    """The served inventory cut to its first ``count`` hosts, each with GPUS_PER_HOST GPUs."""
    inventory = load(path)
    hosts = tuple(h.model_copy(update={"gpus": GPUS_PER_HOST}) for h in inventory.hosts[:count])
    return inventory.model_copy(update={"hosts": hosts})


# Demo hosts a serving process: one process serving 256 SSH servers was the bottleneck of
# the 256-host figures (bench/demo_shard.py says why).
HOSTS_PER_SERVER = 32


class DemoServers:
    """The processes serving one demo cluster, HOSTS_PER_SERVER hosts each."""

    def __init__(self, procs: Sequence[subprocess.Popen[str]]) -> None:
        self.procs = list(procs)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    @property
    def pid(self) -> int:
        return self.procs[0].pid

    def describe(self) -> str:
        pids = self.pids
        listed = ", ".join(map(str, pids)) if len(pids) <= 3 else f"{pids[0]}..{pids[-1]}"
        return f"{len(pids)} process{'es' if len(pids) > 1 else ''} (pid {listed})"


def serve(count: int, who: str, directory: Path) -> tuple[DemoServers, Path]:
    """Start ``count`` demo hosts, HOSTS_PER_SERVER a process (bench/demo_shard.py), and
    write one inventory of them all into ``directory``; each shard prints its own
    inventory path once its hosts listen. ``who`` names the bench in the error if one
    never does."""
    procs = []
    for first in range(0, count, HOSTS_PER_SERVER):
        hosts = min(HOSTS_PER_SERVER, count - first)
        procs.append(
            subprocess.Popen(
                [sys.executable, str(REPO / "bench" / "demo_shard.py"), "--hosts", str(hosts),
                 "--first", str(first)],
                cwd=REPO,
                stdout=subprocess.PIPE,
                text=True,
            )
        )  # fmt: skip
    servers = DemoServers(procs)
    shards = []
    for proc in procs:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        line = proc.stdout.readline().strip() if ready else ""
        if not line:
            stop(servers)
            raise SystemExit(f"{who}: the demo cluster did not start")
        shards.append(Path(line))
    path = directory / "hosts.yaml"
    YAML(typ="safe", pure=True).dump(merged_inventory(shards), path)
    return servers, path


def merged_inventory(shards: Sequence[Path]) -> dict[str, Any]:
    """One inventory of every shard's hosts: each keeps its shard's port, key and
    known_hosts; the other defaults are the same in every shard."""
    merged: dict[str, Any] = {"defaults": {}, "hosts": []}
    for shard in shards:
        data = YAML(typ="safe", pure=True).load(shard.read_text())
        own = {k: data["defaults"].pop(k) for k in ("port", "identity_file", "known_hosts")}
        merged["defaults"] = data["defaults"]
        merged["hosts"].extend({**host, **own} for host in data["hosts"])
    return merged


def stop(servers: DemoServers) -> None:
    # SIGINT is what the demo server handles to close its hosts cleanly.
    for proc in servers.procs:
        proc.send_signal(signal.SIGINT)
    for proc in servers.procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def demo_cluster(count: int, who: str) -> Iterator[tuple[DemoServers, Path]]:
    """The served demo cluster for the length of a ``with`` block: (servers, inventory)."""
    with tempfile.TemporaryDirectory(prefix="distconsole-bench-") as directory:
        servers, inventory = serve(count, who, Path(directory))
        try:
            yield servers, inventory
        finally:
            stop(servers)


def run_json(cmd: Sequence[str], what: str, timeout: float | None = None) -> dict[str, Any]:
    """Run a worker process whose last stdout line is its result as JSON."""
    done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def fmt(value: float | None, spec: str) -> str:
    """A table cell: ``-`` for a figure that was not measured."""
    return "-" if value is None else format(value, spec)


def print_header(header: str) -> None:
    print(header, flush=True)
    print("-" * len(header))
