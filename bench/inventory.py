"""Load + plan of a ddp job over every host of an N-host hosts.yaml: the loader as it is
(libyaml for a valid plain file, console/inventory/yaml_reading.py) vs the naive way
(ruamel's round-trip reader for every file, as before issue 29), wall and CPU seconds,
median of --repeat runs, and the ratio.

    python bench/inventory.py --hosts 1000,10000 --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from console.inventory.formats import load_yaml  # noqa: E402
from console.jobs.models import JobKind  # noqa: E402
from console.jobs.plan.planner import plan  # noqa: E402
from console.jobs.spec import JobSpec  # noqa: E402


def inventory_text(hosts: int) -> str:
    lines = ["defaults:", "  user: alice", "  gpus: 8", "  work_dir: /scratch/dc", "hosts:"]
    for i in range(hosts):
        lines += [f"  - name: n{i:05d}", f"    address: 10.{i // 65536}.{i // 256 % 256}.{i % 256}"]
        if i % 10 == 0:
            lines.append("    tags: [rack1]")
    return "\n".join(lines) + "\n"


def one_run(text: str, path: Path, fast: bool) -> tuple[float, float, float]:
    """(load wall, plan wall, CPU of both)."""
    cpu = time.process_time()
    started = time.perf_counter()
    inventory = load_yaml(text, str(path), path.parent, fast=fast)
    loaded = time.perf_counter()
    job = plan(JobSpec(kind=JobKind.DDP, program="train.py"), inventory, job_id="bench-1")
    planned = time.perf_counter()
    assert len(job.launches) == len(inventory.hosts)
    return loaded - started, planned - loaded, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1000,10000", help="host counts, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'hosts':>6} {'way':<22} {'load s':>7} {'plan s':>7} {'CPU s':>6} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as folder:
        for hosts in (int(n) for n in args.hosts.split(",")):
            path = Path(folder) / f"hosts-{hosts}.yaml"
            text = inventory_text(hosts)
            path.write_text(text)
            cpu_of: dict[bool, float] = {}
            for fast, way in ((True, "libyaml, then checks"), (False, "naive: ruamel only")):
                runs = [one_run(text, path, fast) for _ in range(args.repeat)]
                load_s, plan_s, cpu_s = (statistics.median(r[i] for r in runs) for i in range(3))
                cpu_of[fast] = cpu_s
                ratio = f"{cpu_s / cpu_of[True]:.1f}x" if not fast else ""
                print(
                    f"{hosts:>6} {way:<22} {load_s:>7.2f} {plan_s:>7.2f} {cpu_s:>6.2f} {ratio:>6}"
                )


if __name__ == "__main__":
    main()
