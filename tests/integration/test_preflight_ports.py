"""Pre-flight checks every port a job listens on, on the host that binds it (issue 23
item 11): a PS task's port on its own host, a Ray node's agent port on that node, not
only the master port on the master host. Real sshd hosts (node0 on 127.0.0.10, node1 on
127.0.0.11), the real CLI, a port taken on node1's address by a listening socket."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sshd_cluster import SshdCluster

pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.timeout(180)]

CLI = [sys.executable, "-m", "console"]


def dc(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(tmp_path / "data"))
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=150)


def _free_everywhere(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


@contextmanager
def taken_on(address: str, offset: int, span: int) -> Iterator[tuple[int, int]]:
    """(base, busy): a port ``busy`` listened on at ``address`` alone, whose job ports
    ``base``..``base + span - 1`` (busy = base + offset) are free everywhere else."""
    for _ in range(50):
        with socket.socket() as busy:
            busy.bind((address, 0))
            busy.listen()
            port = busy.getsockname()[1]
            base = port - offset
            others = [base + i for i in range(span) if i != offset]
            if base >= 1024 and all(_free_everywhere(p) for p in others):
                yield base, port
                return
    raise AssertionError("no free port range found")


def port_findings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "[port]" in line]


def test_a_ps_tasks_port_taken_on_its_own_host_fails_preflight(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=2)
    inv = str(cluster.inventory_path)
    # ps 0 on node0 (base), worker 0 on node1 (base + 1), worker 1 on node0 (base + 2).
    # Both hosts share this machine: node0 would read base + 1 taken too if it were
    # asked, so the one finding also says each host is asked about its own ports only.
    with taken_on(cluster.host("node1").address, 1, 3) as (base, busy):
        result = dc(
            tmp_path, "launch", inv, "--kind", "ps", "--ps", "1", "--workers", "2",
            "--master-port", str(base), "--", "example:ps",
        )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "nothing was started" in result.stderr
    (finding,) = port_findings(result.stderr)
    assert finding.startswith(f"FAIL [port] node1: worker 0's port {busy} is in use (")
    assert "--master-port" in finding


def test_a_ray_nodes_agent_port_taken_on_that_node_fails_preflight(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=2)
    inv = str(cluster.inventory_path)
    # Ray from base P: the head's GCS P, dashboard P+1, client server P+2, agent P+3;
    # node1's agent P+4.
    with taken_on(cluster.host("node1").address, 4, 5) as (base, busy):
        result = dc(
            tmp_path, "launch", inv, "--kind", "ray", "--master-port", str(base),
            "--", "example:ray",
        )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    (finding,) = port_findings(result.stderr)
    assert finding.startswith(f"FAIL [port] node1: Ray dashboard agent port {busy} is in use (")


def test_the_ddp_master_port_is_checked_on_the_master_alone(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=2)
    inv = str(cluster.inventory_path)
    # Both hosts share this machine, so node1 would read the port taken too if it were
    # asked: one finding, on node0, says only the master (which binds it) is asked.
    with taken_on(cluster.host("node0").address, 0, 1) as (base, busy):
        result = dc(
            tmp_path, "launch", inv, "--kind", "ddp", "--gpus-per-host", "1",
            "--master-port", str(base), "--", "example:ddp",
        )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    (finding,) = port_findings(result.stderr)
    assert finding == (
        f"FAIL [port] node0: master port {busy} is in use (Address already in use); "
        "choose another with --master-port (or leave it out to get a free one)"
    )
