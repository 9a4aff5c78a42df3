"""``--sync DIR`` over real sshd hosts with their own users: only missing objects travel,
an unchanged tree is reused, a changed file is seen, and ``launch --sync`` runs the program
from the synced copy on both hosts."""

from __future__ import annotations

import os
import re
import secrets
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshd_cluster import SshdCluster, unavailable_reason

from console import inventory as inventory_module
from console.jobs.sync.push import SyncProgress, sync_hosts
from console.jobs.sync.tree import HashCache, SyncTree, scan_tree
from console.transport.pool import ClusterConnections

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

CLI = [sys.executable, "-m", "console"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    made = SshdCluster(tmp_path_factory.mktemp("sync-cluster"), 2)
    yield made
    made.close()


def project(root: Path, token: str) -> Path:
    """A small project whose every file is new to the hosts (the token)."""
    (root / "pkg").mkdir(parents=True)
    (root / "show.py").write_text(
        "import os, socket\n"
        "from pkg.message import TEXT\n"
        f"# {token}\n"
        "print('synced', os.environ['NODE_RANK'], os.getcwd(), TEXT, flush=True)\n"
    )
    (root / "pkg" / "__init__.py").write_text(f"# {token}\n")
    (root / "pkg" / "message.py").write_text(f"TEXT = 'first-{token}'\n")
    (root / "notes.txt").write_text(f"same content {token}\n")
    (root / "copy-of-notes.txt").write_text(f"same content {token}\n")
    (root / "out.log").write_text("ignored\n")
    (root / ".gitignore").write_text(f"# {token}\n*.log\n")
    return root


async def sync(cluster: SshdCluster, tree: SyncTree) -> tuple[dict, list[SyncProgress]]:
    inventory = inventory_module.load(str(cluster.inventory_path))
    seen: list[SyncProgress] = []
    async with ClusterConnections(inventory) as pool:
        await pool.wait_settled()
        done = await sync_hosts(pool, ["node0", "node1"], tree, seen.append)
    return done, seen


def on_host(cluster: SshdCluster, name: str, remote: str) -> Path:
    return cluster.host(name).home / remote.removeprefix("~/")


async def test_only_missing_objects_travel_and_unchanged_trees_are_reused(
    cluster: SshdCluster, tmp_path: Path
) -> None:
    token = secrets.token_hex(8)
    root = project(tmp_path / "proj", token)
    cache = HashCache(tmp_path / "hashes.json")
    tree = scan_tree(str(root), cache=cache)
    assert "out.log" not in {e.path for e in tree.entries}
    first, progress = await sync(cluster, tree)
    # Six files, five contents (two files share one): five objects per host.
    assert {h: (d.objects_sent, d.reused) for h, d in first.items()} == {
        "node0": (5, False),
        "node1": (5, False),
    }
    assert {p.host for p in progress if p.phase == "sending"} == {"node0", "node1"}
    assert [p.phase for p in progress if p.host == "node1"][-1] == "ready"
    for name in ("node0", "node1"):
        synced = on_host(cluster, name, tree.remote_dir)
        assert first[name].tree == str(synced)
        assert (synced / "pkg" / "message.py").read_text() == f"TEXT = 'first-{token}'\n"
        notes = (synced / "notes.txt").stat()
        assert notes.st_ino == (synced / "copy-of-notes.txt").stat().st_ino  # one object
        assert notes.st_nlink >= 3  # the store's object and both names in the tree
        assert stat.S_IMODE(notes.st_mode) == 0o444  # read-only: no writing through a link
        assert notes.st_uid == cluster.host(name).uid
        assert not (synced / "out.log").exists()

    again, _ = await sync(cluster, tree)
    assert {h: (d.objects_sent, d.reused) for h, d in again.items()} == {
        "node0": (0, True),
        "node1": (0, True),
    }

    (root / "pkg" / "message.py").write_text(f"TEXT = 'second-{token}'\n")
    changed = scan_tree(str(root), cache=cache)
    assert changed.remote_dir != tree.remote_dir
    third, _ = await sync(cluster, changed)
    assert {h: d.objects_sent for h, d in third.items()} == {"node0": 1, "node1": 1}
    for name in ("node0", "node1"):
        new = on_host(cluster, name, changed.remote_dir)
        old = on_host(cluster, name, tree.remote_dir)
        assert (new / "pkg" / "message.py").read_text() == f"TEXT = 'second-{token}'\n"
        assert (old / "pkg" / "message.py").read_text() == f"TEXT = 'first-{token}'\n"
        assert (new / "show.py").stat().st_ino == (old / "show.py").stat().st_ino

    # A file removed from a synced tree on one host: that host rebuilds it from its store
    # (nothing travels), the other reuses its own.
    (on_host(cluster, "node1", changed.remote_dir) / "notes.txt").unlink()
    mended, _ = await sync(cluster, changed)
    assert {h: (d.objects_sent, d.reused) for h, d in mended.items()} == {
        "node0": (0, True),
        "node1": (0, False),
    }
    assert (on_host(cluster, "node1", changed.remote_dir) / "notes.txt").exists()


def launch(cluster: SshdCluster, tmp_path: Path, root: Path) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        DISTCONSOLE_DATA_DIR=str(tmp_path / "data"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    return subprocess.run(
        [*CLI, "launch", str(cluster.inventory_path), "--kind", "ddp", "--gpus-per-host", "1",
         "--sync", str(root), "--", "show.py"],
        capture_output=True, text=True, env=env, timeout=180, check=False,
    )  # fmt: skip


def sent(stderr: str) -> dict[str, str]:
    """``distconsole: sync node0: DIR: 5 files sent (0.0 MB) in 0.12s`` -> {host: what}."""
    found = re.findall(r"^distconsole: sync (node\d): \S+: (.+?)(?: \(| in )", stderr, re.M)
    return dict(found)


def test_launch_runs_the_program_from_the_synced_copy(cluster: SshdCluster, tmp_path: Path) -> None:
    token = secrets.token_hex(8)
    root = project(tmp_path / "proj", token)
    first = launch(cluster, tmp_path, root)
    assert first.returncode == 0, first.stderr[-3000:]
    lines = first.stdout.splitlines()
    for host, rank in (("node0", 0), ("node1", 1)):
        home = cluster.host(host).home
        expected = f"synced {rank} {home}/.cache/distconsole/sync/trees/proj-"
        assert any(expected in ln and f"first-{token}" in ln for ln in lines), first.stdout
    assert sent(first.stderr) == {"node0": "5 files sent", "node1": "5 files sent"}

    (root / "pkg" / "message.py").write_text(f"TEXT = 'second-{token}'\n")
    second = launch(cluster, tmp_path, root)
    assert second.returncode == 0, second.stderr[-3000:]
    assert sum(f"second-{token}" in ln for ln in second.stdout.splitlines()) == 2
    assert sent(second.stderr) == {"node0": "1 files sent", "node1": "1 files sent"}


# Each rank prints its cwd and a file of the synced tree (one os.write: mpirun forwards a
# print's text and newline as separate pieces).
MPI_SHOW = """\
import os
text = open("notes.txt").read().strip()
os.write(1, ("mpi rank=%s cwd=%s notes=%s\\n" % (
    os.environ["OMPI_COMM_WORLD_RANK"], os.getcwd(), text)).encode())
"""


@pytest.mark.mpi
def test_mpi_ranks_on_both_hosts_run_from_the_synced_copy(
    cluster: SshdCluster, tmp_path: Path
) -> None:
    """mpirun's ranks on node1 enter node1's copy of the tree (planned with it as the
    working directory, so pre-flight looks for mpi.py there too)."""
    token = secrets.token_hex(8)
    root = project(tmp_path / "proj", token)
    (root / "mpi.py").write_text(MPI_SHOW)
    env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(tmp_path / "data"))
    done = subprocess.run(
        [*CLI, "launch", str(cluster.inventory_path), "--kind", "mpi", "--hosts", "node0,node1",
         "--gpus-per-host", "2", "--interface", "lo", "--sync", str(root), "--", "mpi.py"],
        capture_output=True, text=True, env=env, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    tree = scan_tree(str(root))
    # ``[node0 launcher@node0] mpi rank=...``: mpirun forwards every rank's output.
    seen = sorted(ln.split("] ", 1)[1] for ln in done.stdout.splitlines() if "] mpi rank=" in ln)
    expected = sorted(
        f"mpi rank={rank} cwd={on_host(cluster, host, tree.remote_dir)} notes=same content {token}"
        for rank, host in enumerate(("node0", "node0", "node1", "node1"))
    )
    assert seen == expected, done.stdout
