"""Shared fixtures: a real sshd cluster on loopback, a black-hole TCP port, and a scripted
in-process SSH server for fault tests."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

# Test modules import the fixture's types as ``from sshd_cluster import SshdCluster``.
sys.path.insert(0, str(Path(__file__).parent))

from sshd_cluster import (
    BlackHole,
    SshdCluster,
    black_hole_socket,
    unavailable_reason,
)

# Under pytest-xdist: module units, heaviest first, Slurm and Ray kept together (parallel.py).
pytest_plugins = ["parallel"]

if TYPE_CHECKING:
    from scripted_ssh import ScriptedSshServer


def pytest_collection_finish(session: pytest.Session) -> None:
    """A test module may define ``start_early(items)``: called once collection ends with
    its selected items, it starts slow set-up that mostly waits (the quick start's pip
    install, tests/integration/test_demo_quickstart.py) to run beside the tests before it.
    Under pytest-xdist every worker collects everything: only the worker the module is
    pinned to (parallel.PINNED) starts it."""
    if session.config.option.collectonly:
        return
    from parallel import PINNED  # after pytest_plugins has imported it (assert rewriting)

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    by_module: dict[Any, list[pytest.Item]] = {}
    for item in session.items:
        if worker and PINNED.get(item.nodeid.split("::", 1)[0].split("@", 1)[0]) != worker:
            continue
        module = getattr(item, "module", None)
        if callable(getattr(module, "start_early", None)):
            by_module.setdefault(module, []).append(item)
    for module, items in by_module.items():
        module.start_early(items)


@pytest.fixture
def sshd_cluster(tmp_path: Path) -> Iterator[Callable[..., SshdCluster]]:
    """Factory: ``cluster = sshd_cluster(n=2)`` starts n real sshd hosts; torn down after.

    ``shared_account=True``: one user and one ssh port on every host (see sshd_cluster.py).
    """
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    clusters: list[SshdCluster] = []

    def make(n: int = 2, *, shared_account: bool = False, peer_ssh: bool = True) -> SshdCluster:
        root = tmp_path / f"sshd-cluster-{len(clusters)}"
        cluster = SshdCluster(root, n, shared_account=shared_account, peer_ssh=peer_ssh)
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        cluster.close()


@pytest.fixture
def black_hole() -> Iterator[BlackHole]:
    """A loopback port that accepts TCP connections and never answers (``.address``, ``.port``)."""
    with black_hole_socket() as hole:
        yield hole


@pytest.fixture
async def scripted_ssh(
    tmp_path: Path,
) -> AsyncIterator[Callable[..., Awaitable[ScriptedSshServer]]]:
    """Factory: ``server = await scripted_ssh(name="node0")`` starts a SCRIPTED in-process
    asyncssh server (tests/scripted_ssh.py; no root, no OpenSSH); closed after the test."""
    from scripted_ssh import ScriptedSshServer  # asyncssh and console only when used

    servers: list[ScriptedSshServer] = []

    async def make(name: str = "node0") -> ScriptedSshServer:
        server = ScriptedSshServer(tmp_path / f"scripted-{len(servers)}", name=name)
        servers.append(server)
        await server.start()
        return server

    yield make
    for server in servers:
        await server.close()
    errors = [e for s in servers for e in s.errors]
    assert not errors, f"the scripted server failed while serving: {errors}"
