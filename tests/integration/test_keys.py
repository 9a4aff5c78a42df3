"""``distconsole keys`` on real sshd hosts with their own users that start unable to reach
each other: afterwards each user SSHes to the other host by its inventory name with
BatchMode and strict host key checking; a second run changes nothing; --dry-run changes
nothing; --remove takes out exactly the tool's lines."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator

import pytest
from sshd_cluster import CLUSTER_KEY_NAME, CLUSTER_KNOWN_HOSTS, SshdCluster, unavailable_reason

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

CLI = [sys.executable, "-m", "console"]
USER_CONFIG = "Host example.org\n  User someone-else\n"
USER_KNOWN = (
    "example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    made = SshdCluster(tmp_path_factory.mktemp("keys-cluster"), 2)
    for host in made.hosts:
        ssh = host.home / ".ssh"
        # Hosts that cannot reach each other yet: no peer config, key or known_hosts
        # (homes outlive test runs, so an earlier run's key goes too).
        for name in (CLUSTER_KEY_NAME, CLUSTER_KNOWN_HOSTS, "known_hosts", "id_distconsole",
                     "id_distconsole.pub", ".distconsole-keys.lock"):  # fmt: skip
            (ssh / name).unlink(missing_ok=True)
        for name, text in (("config", USER_CONFIG), ("known_hosts", USER_KNOWN)):
            (ssh / name).write_text(text)
            os.chown(ssh / name, host.uid, host.gid)
    yield made
    made.close()


def dc(cluster: SshdCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "keys", str(cluster.inventory_path), *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def ssh_from(cluster: SshdCluster, source: str, target: str) -> subprocess.CompletedProcess[str]:
    """As ``source``'s user, on ``source``: ``ssh -o BatchMode=yes ... TARGET whoami``."""
    host = cluster.host(source)
    inner = f"ssh -o BatchMode=yes -o StrictHostKeyChecking=yes {target} whoami"
    return subprocess.run(
        ["ssh", "-i", str(cluster.client_key_path), "-p", str(host.port),
         "-o", f"UserKnownHostsFile={cluster.known_hosts_path}", "-o", "BatchMode=yes",
         "-o", "StrictHostKeyChecking=yes", "-F", "/dev/null",
         f"{host.user}@{host.address}", inner],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def snapshot(cluster: SshdCluster) -> dict[str, bytes]:
    files = {}
    for host in cluster.hosts:
        for path in sorted((host.home / ".ssh").iterdir()):
            if path.name != ".distconsole-keys.lock":
                files[f"{host.name}/{path.name}"] = path.read_bytes()
    return files


def test_keys_make_every_host_reach_every_other(cluster: SshdCluster) -> None:
    assert ssh_from(cluster, "node0", "node1").returncode != 0
    before = snapshot(cluster)

    dry = dc(cluster, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "node0: would create ~/.ssh/id_distconsole" in dry.stdout
    assert "node1: would change" in dry.stdout and "Host node1" in dry.stdout
    assert snapshot(cluster) == before

    done = dc(cluster)
    assert done.returncode == 0, done.stderr
    assert "node0: created ~/.ssh/id_distconsole" in done.stdout
    for source, target in (("node0", "node1"), ("node1", "node0")):
        result = ssh_from(cluster, source, target)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == cluster.host(target).user
    for host in cluster.hosts:
        ssh = host.home / ".ssh"
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in ssh.iterdir()}
        assert stat.S_IMODE(ssh.stat().st_mode) == 0o700
        assert modes["authorized_keys"] == modes["config"] == modes["id_distconsole"] == 0o600
        assert modes["known_hosts"] == modes["id_distconsole.pub"] == 0o644
        config = (ssh / "config").read_text()
        assert config.endswith(USER_CONFIG)  # the user's own block, untouched, after ours
        assert f"Host node1\n  HostName {cluster.host('node1').address}\n" in config
        assert f"  User {cluster.host('node1').user}\n" in config
        assert (ssh / "known_hosts").read_text().startswith(USER_KNOWN)
        assert (ssh / "authorized_keys").read_text().startswith(cluster.client_public_key)
    after = snapshot(cluster)

    again = dc(cluster)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "nothing to change on 2 host(s)"
    assert snapshot(cluster) == after

    removed = dc(cluster, "--remove")
    assert removed.returncode == 0, removed.stderr
    for host in cluster.hosts:
        ssh = host.home / ".ssh"
        assert (ssh / "config").read_text() == USER_CONFIG
        assert (ssh / "known_hosts").read_text() == USER_KNOWN
        assert (ssh / "authorized_keys").read_text() == cluster.client_public_key + "\n"
        assert (ssh / "id_distconsole").exists()  # a key is kept, as a present one is
    assert ssh_from(cluster, "node0", "node1").returncode != 0
