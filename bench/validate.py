"""How long `distconsole validate --quick` takes for N real sshd hosts, and its figures.

Each count gets its own shared-account sshd cluster (one Unix user, one sshd per loopback
address: cheap hosts, tests/sshd_cluster.py), then `validate --quick --json` runs against
it as a user would; printed: hosts, wall time, the ring's bus bandwidth, the median pair,
the median CPU GFLOPS and memory GB/s, and the verdicts. On one machine every host imports
torch and measures on the same cores, so the time grows with the count (and the load);
on a real fleet the compute phase costs about one host's time per `--parallel` wave.

    python bench/validate.py --hosts 4,16 [--parallel 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from common import host_counts, positive_int  # noqa: E402
from sshd_cluster import SshdCluster, unavailable_reason  # noqa: E402


def run_one(count: int, parallel: int, root: Path) -> dict[str, object]:
    cluster = SshdCluster(root / f"cluster-{count}", count, shared_account=True)
    try:
        env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(root / f"data-{count}"))
        argv = [sys.executable, "-m", "console", "validate", str(cluster.inventory_path)]
        argv += ["--quick", "--json", "--parallel", str(parallel)]
        started = time.monotonic()
        done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env)
        took = time.monotonic() - started
    finally:
        cluster.close()
    try:
        document = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise SystemExit(
            f"validate gave no JSON (status {done.returncode}): {done.stderr}"
        ) from None
    hosts = [r for r in document["rows"] if r["gpu"] is None]
    pairs = [link["busbw_gbps"] for link in document["links"]]

    def median_of(key: str) -> float:
        values = [float(r["figures"][key]) for r in hosts if key in r["figures"]]
        return statistics.median(values) if values else 0.0

    states = [r["state"] for r in document["rows"]] + [x["state"] for x in document["links"]]
    return {
        "hosts": count,
        "wall_s": round(took, 1),
        "ring_gbps": (document["ring"] or {}).get("busbw_gbps"),
        "pairs": len(pairs),
        "median_pair_gbps": round(statistics.median(pairs), 4) if pairs else None,
        "cpu_gflops": round(median_of("cpu_gflops"), 2),
        "mem_gbps": round(median_of("mem_gbps"), 2),
        "verdicts": {s: states.count(s) for s in ("ok", "warn", "fail")},
        "status": done.returncode,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=host_counts("4,16", 64), default=[4, 16])
    parser.add_argument("--parallel", type=positive_int, default=4)
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPUs, load average {load:.1f} at the start")
    with tempfile.TemporaryDirectory(prefix="bench-validate-") as tmp:
        for count in args.hosts:
            row = run_one(count, args.parallel, Path(tmp))
            print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
