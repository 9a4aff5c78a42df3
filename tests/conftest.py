"""Shared fixtures: a real sshd cluster on loopback and a black-hole TCP port."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Test modules import the fixture's types as ``from sshd_cluster import SshdCluster``.
sys.path.insert(0, str(Path(__file__).parent))

from sshd_cluster import (
    BlackHole,
    SshdCluster,
    black_hole_socket,
    unavailable_reason,
)


@pytest.fixture
def sshd_cluster(tmp_path: Path) -> Iterator[Callable[..., SshdCluster]]:
    """Factory: ``cluster = sshd_cluster(n=2)`` starts n real sshd hosts; torn down after.

    ``shared_account=True``: one user and one ssh port on every host (see sshd_cluster.py).
    """
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    clusters: list[SshdCluster] = []

    def make(n: int = 2, *, shared_account: bool = False) -> SshdCluster:
        root = tmp_path / f"sshd-cluster-{len(clusters)}"
        cluster = SshdCluster(root, n, shared_account=shared_account)
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
