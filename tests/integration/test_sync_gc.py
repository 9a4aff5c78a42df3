"""``distconsole sync-gc`` on real sshd hosts with their own users: old synced trees go,
the last N (a reused tree counts as synced) and a tree a process works in stay, objects
no tree links to go with them, ``--dry-run`` removes nothing. The trees carry a unique
name and ``--name`` limits the gc to them, so other tests' trees in the same homes stay."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import subprocess
import time
from pathlib import Path

import pytest
from sshd_cluster import SshdCluster

from console import inventory as inventory_module
from console.jobs.sync.push import sync_hosts
from console.jobs.sync.tree import REMOTE_ROOT, SyncTree, scan_tree
from console.transport.pool import ClusterConnections
from tests.integration.test_jobs_cli import dc

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

HOSTS = ("node0", "node1")


async def sync(cluster: SshdCluster, tree: SyncTree) -> dict[str, int]:
    inventory = inventory_module.load(str(cluster.inventory_path))
    async with ClusterConnections(inventory) as pool:
        await pool.wait_settled()
        done = await sync_hosts(pool, HOSTS, tree)
    return {h: d.objects_sent for h, d in done.items()}


def version(root: Path, text: str) -> None:
    root.mkdir(exist_ok=True)
    (root / "shared.py").write_text(f"# same in every version {root.name}\n")
    # Unique contents: an object another tree in these homes links to is not freed.
    (root / "version.py").write_text(f"V = {text!r}  # {root.name}\n")


def store(cluster: SshdCluster, host: str) -> Path:
    return cluster.host(host).home / REMOTE_ROOT.removeprefix("~/")


def objects_of(cluster: SshdCluster, host: str, tree: SyncTree) -> list[Path]:
    return [store(cluster, host) / "objects" / e.oid[:2] / e.oid[2:] for e in tree.entries]


def age(paths: list[Path]) -> None:
    """Stored two hours ago: gc leaves objects of the last hour (a sync may link them)."""
    then = time.time() - 7200
    for path in paths:
        os.utime(path, (then, then), follow_symlinks=False)


def test_sync_gc_keeps_the_last_trees_and_frees_the_rest(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    inv = str(cluster.inventory_path)
    root = tmp_path / f"gc{secrets.token_hex(6)}"
    trees = []
    for text in ("one", "two", "three"):
        version(root, text)
        trees.append(scan_tree(str(root)))
        asyncio.run(sync(cluster, trees[-1]))
    one, two, three = trees
    assert asyncio.run(sync(cluster, one)) == {"node0": 0, "node1": 0}  # reused: now the newest
    for host in HOSTS:
        age([p for t in trees for p in objects_of(cluster, host, t)])

    dry = dc(tmp_path, "sync-gc", inv, "--keep", "2", "--name", root.name, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    for host in HOSTS:
        assert re.search(
            rf"^{host}: would free \d+ B: 1 tree\(s\), 1 object\(s\); kept 2 tree\(s\)$",
            dry.stdout,
            re.M,
        ), dry.stdout
        assert f"  would remove {two.dir_name}" in dry.stdout
        assert (store(cluster, host) / "trees" / two.dir_name).is_dir()  # nothing removed

    done = dc(tmp_path, "sync-gc", inv, "--keep", "2", "--name", root.name)
    assert done.returncode == 0, done.stderr
    assert f"  removed {two.dir_name}" in done.stdout
    for host in HOSTS:
        base = store(cluster, host)
        assert not (base / "trees" / two.dir_name).exists()
        version_two, version_one = (
            objects_of(cluster, host, t)[[e.path for e in t.entries].index("version.py")]
            for t in (two, one)
        )
        assert not version_two.exists() and version_one.exists()
        assert (
            base / "trees" / one.dir_name / "version.py"
        ).read_text() == f"V = 'one'  # {root.name}\n"
        assert (base / "trees" / three.dir_name / "shared.py").exists()
    assert asyncio.run(sync(cluster, three)) == {"node0": 0, "node1": 0}  # still whole

    # --keep 0 with a process working in tree one on node0: that tree stays there.
    node0 = cluster.host("node0")
    busy = subprocess.Popen(  # the host user's, whole (/proc/PID/cwd is readable by it)
        ["sleep", "60"],
        cwd=store(cluster, "node0") / "trees" / one.dir_name,
        user=node0.uid,
        group=node0.gid,
        extra_groups=[],
    )
    try:
        for host in HOSTS:
            age([p for t in (one, three) for p in objects_of(cluster, host, t)])
        emptied = dc(tmp_path, "sync-gc", inv, "--keep", "0", "--name", root.name)
    finally:
        busy.kill()
        busy.wait()
    assert emptied.returncode == 0, emptied.stderr
    assert f"(1 in use: {one.dir_name})" in emptied.stdout
    assert (store(cluster, "node0") / "trees" / one.dir_name).is_dir()
    for path in objects_of(cluster, "node0", one):
        assert path.exists()  # linked by the tree kept
    for path in objects_of(cluster, "node1", one) + objects_of(cluster, "node1", three):
        assert not path.exists()
    assert not any((store(cluster, "node1") / "trees" / t.dir_name).exists() for t in (one, three))

    # The process gone, the tree goes too (and nothing of this test stays in the homes).
    last = dc(tmp_path, "sync-gc", inv, "--keep", "0", "--name", root.name)
    assert last.returncode == 0, last.stderr
    assert "node0: freed " in last.stdout and f"  removed {one.dir_name}" in last.stdout
    assert not (store(cluster, "node0") / "trees" / one.dir_name).exists()
    assert not any(p.exists() for p in objects_of(cluster, "node0", one))
