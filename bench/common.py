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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


def serve(count: int, who: str) -> tuple[subprocess.Popen[str], Path]:
    """Start ``distconsole demo --serve`` with ``count`` hosts; it prints its inventory
    path once the hosts listen. ``who`` names the bench in the error if it never does."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "console", "demo", "--serve", "--hosts", str(count)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    line = proc.stdout.readline().strip() if ready else ""
    if not line:
        proc.kill()
        proc.wait()
        raise SystemExit(f"{who}: the demo cluster did not start")
    return proc, Path(line)


def stop(proc: subprocess.Popen[str]) -> None:
    # SIGINT is what the demo server handles to close its hosts cleanly.
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def demo_cluster(count: int, who: str) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """The served demo cluster for the length of a ``with`` block: (process, inventory)."""
    proc, inventory = serve(count, who)
    try:
        yield proc, inventory
    finally:
        stop(proc)


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
