"""Issue 23 item 1, ``--sync``: a symlink travels as a symlink (as git and ``rsync -a``
sync it), never followed out of the tree, and a file only its owner may read stays so on
the hosts. Real sshd hosts with users of their own and homes open to everyone (755); a
file is read as another host's user. Both listers: a git work tree and .gitignore rules."""

from __future__ import annotations

import asyncio
import secrets
import stat
import subprocess
from pathlib import Path

import pytest
from sshd_cluster import SshdCluster

from console import inventory as inventory_module
from console.jobs.sync.push import sync_hosts
from console.jobs.sync.tree import REMOTE_ROOT, SyncTree, scan_tree
from console.transport.pool import ClusterConnections
from tests.integration.test_private_files import read_as

pytestmark = [pytest.mark.sshd, pytest.mark.slow]


async def sync(cluster: SshdCluster, tree: SyncTree) -> None:
    inventory = inventory_module.load(str(cluster.inventory_path))
    async with ClusterConnections(inventory) as pool:
        await pool.wait_settled()
        await sync_hosts(pool, [h.name for h in cluster.hosts], tree)


@pytest.mark.parametrize("lister", ["git", "gitignore"])
def test_sync_keeps_links_as_links_and_private_files_private(
    sshd_cluster, tmp_path, lister
) -> None:
    cluster = sshd_cluster(n=2)
    for host in cluster.hosts:
        host.home.chmod(0o755)
    secret = f"creds-{secrets.token_hex(8)}"
    token = f"token-{secrets.token_hex(8)}"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "credentials").write_text(secret)
    (outside / "credentials").chmod(0o600)
    (outside / "more.txt").write_text(secret)
    code = tmp_path / f"code{secrets.token_hex(4)}"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    (code / "token").write_text(token)
    (code / "token").chmod(0o600)
    (code / "run.sh").write_text("#!/bin/sh\n")
    (code / "run.sh").chmod(0o700)
    (code / "creds").symlink_to(outside / "credentials")  # out of the tree, absolute
    (code / "up").symlink_to("../outside")  # a folder out of the tree, relative
    (code / "main.py").symlink_to("train.py")  # inside the tree
    if lister == "git":
        subprocess.run(["git", "init", "-q", str(code)], check=True)

    tree = scan_tree(str(code))
    assert tree.lister == lister
    assert sorted(e.path for e in tree.entries) == ["run.sh", "token", "train.py"]
    assert {(link.path, link.target) for link in tree.links} == {
        ("creds", str(outside / "credentials")),
        ("up", "../outside"),
        ("main.py", "train.py"),
    }
    asyncio.run(sync(cluster, tree))

    node0, node1 = cluster.hosts
    for host, other in ((node0, node1), (node1, node0)):
        store = host.home / REMOTE_ROOT.removeprefix("~/")
        synced = store / "trees" / tree.dir_name
        for link in tree.links:
            assert (synced / link.path).is_symlink(), (host.name, link.path)
            assert (synced / link.path).readlink() == Path(link.target)
        objects = [p for p in (store / "objects").rglob("*") if p.is_file()]
        assert not any(secret in p.read_text(errors="replace") for p in objects), host.name
        modes = {
            name: stat.S_IMODE((synced / name).stat().st_mode)
            for name in ("token", "train.py", "run.sh")
        }
        assert modes == {"token": 0o400, "train.py": 0o444, "run.sh": 0o500}, host.name
        assert read_as(host, synced / "token").stdout == token
        refused = read_as(other, synced / "token")
        assert refused.returncode != 0 and token not in refused.stdout, host.name
        assert read_as(other, synced / "train.py").stdout == "print('hi')\n"
