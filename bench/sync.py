"""``--sync DIR``: first, second (unchanged) and one-file-changed sync of a tree to 2 real
sshd hosts, against the naive way (a full ``scp -r`` of the tree to every host, per launch).

    python bench/sync.py [--size-mb 100] [--small-files 2000] [--large-files 4]

The tree is random bytes (incompressible): ``--small-files`` files sharing a fifth of the
size, the rest in ``--large-files`` large ones. Its files are dated 1 minute back, as an
edited project is (files changed within 2 s are re-hashed every time: see sync_tree's
"racy" rule). Each figure is the whole step a launch takes: scan (list + hash, through
the local hash cache) plus the hosts' check round trip and transfer, both hosts in
parallel; scp copies to both hosts in parallel too. Needs root (it starts sshd hosts
with their own users, tests/sshd_cluster.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from sshd_cluster import SshdCluster, unavailable_reason  # noqa: E402

from console.inventory import load  # noqa: E402
from console.jobs.sync.push import HostSync, sync_hosts  # noqa: E402
from console.jobs.sync.tree import HashCache, scan_tree  # noqa: E402
from console.transport.pool import ClusterConnections  # noqa: E402


def make_tree(root: Path, size_mb: int, small: int, large: int) -> None:
    total = size_mb * 1_000_000
    small_size = max(1, total // 5 // max(small, 1))
    large_size = (total - small_size * small) // max(large, 1)
    for i in range(small):
        path = root / f"pkg{i % 20}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(small_size))
    for i in range(large):
        (root / f"weights{i}.bin").write_bytes(os.urandom(large_size))
    past = time.time() - 60
    for path in root.rglob("*"):
        os.utime(path, (past, past))


async def timed_sync(
    cluster: SshdCluster, source: Path, cache: Path
) -> tuple[float, dict[str, HostSync], int]:
    inventory = load(str(cluster.inventory_path))
    async with ClusterConnections(inventory) as pool:
        await pool.wait_settled()
        started = time.perf_counter()
        tree = scan_tree(str(source), cache=HashCache(cache))
        done = await sync_hosts(pool, [h.name for h in cluster.hosts], tree)
        return time.perf_counter() - started, done, tree.hashed_bytes


def naive_copy(cluster: SshdCluster, source: Path, run: int) -> float:
    """Every host gets the whole tree again (``scp -r``), both hosts at once."""
    started = time.perf_counter()
    procs = []
    for h in cluster.hosts:
        command = [
            "scp", "-q", "-r", "-P", str(h.port), "-i", str(cluster.client_key_path),
            "-o", f"UserKnownHostsFile={cluster.known_hosts_path}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
            str(source), f"{h.user}@{h.address}:naive-sync-{run}",
        ]  # fmt: skip
        procs.append(subprocess.Popen(command))
    if any(p.wait() != 0 for p in procs):
        raise SystemExit("scp failed")
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=100)
    parser.add_argument("--small-files", type=int, default=2000)
    parser.add_argument("--large-files", type=int, default=4)
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason is not None:
        raise SystemExit(f"bench/sync.py: {reason}")
    work = Path(tempfile.mkdtemp(prefix="bench-sync-"))
    cluster = SshdCluster(work / "cluster", 2)
    try:
        source = work / "project"
        make_tree(source, args.size_mb, args.small_files, args.large_files)
        cache = work / "hashes.json"
        rows = []
        for label in ("first (cold store, cold hash cache)", "second (unchanged)"):
            seconds, done, hashed = asyncio.run(timed_sync(cluster, source, cache))
            rows.append((label, seconds, done, hashed))
        changed = next(source.glob("pkg0/*.py"))
        changed.write_bytes(os.urandom(changed.stat().st_size))
        os.utime(changed, (time.time() - 60, time.time() - 60))
        seconds, done, hashed = asyncio.run(timed_sync(cluster, source, cache))
        rows.append(("one file changed", seconds, done, hashed))
        naive = [naive_copy(cluster, source, run) for run in (1, 2)]
    finally:
        for host in cluster.hosts:
            shutil.rmtree(host.home / ".cache" / "distconsole" / "sync", ignore_errors=True)
            for run in (1, 2):
                shutil.rmtree(host.home / f"naive-sync-{run}", ignore_errors=True)
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)
    files = args.small_files + args.large_files
    print(f"$ python bench/sync.py --size-mb {args.size_mb} --small-files "
          f"{args.small_files} --large-files {args.large_files}")  # fmt: skip
    print(f"tree: {files} files, {args.size_mb} MB; 2 sshd hosts (loopback, own users)")
    print(f"{'step':<38}{'seconds':>9}{'sent per host':>22}{'hashed':>10}")
    for label, seconds, done, hashed in rows:
        per_host = max(done.values(), key=lambda d: d.bytes_sent)
        sent = f"{per_host.objects_sent} files {per_host.bytes_sent / 1e6:.1f} MB"
        print(f"{label:<38}{seconds:>9.3f}{sent:>22}{hashed / 1e6:>8.1f}MB")
    naive_s = sum(naive) / len(naive)
    print(f"{'naive: scp -r of the tree, per launch':<38}{naive_s:>9.3f}"
          f"{f'{files} files {args.size_mb:.1f} MB':>22}")  # fmt: skip
    second = rows[1][1]
    print(f"ratio naive / second launch: {naive_s / second:.1f}x "
          f"(second launch {second:.3f} s, naive {naive_s:.3f} s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
