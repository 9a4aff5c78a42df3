"""Inventories and fixed host states for UI tests that do not need live hosts."""

from __future__ import annotations

from console.inventory import Host, Inventory
from console.transport.base import HostState, HostStatus

# Snapshot tests render times relative to this instant.
FROZEN_NOW = 1_700_000_000.0


def static_inventory(*, insecure: bool = False) -> Inventory:
    return Inventory(
        path="/srv/cluster/hosts.yaml",
        hosts=(
            Host(name="node0", address="10.0.0.10", user="alice", gpus=8, tags=("a100", "rack1")),
            Host(name="node1", address="10.0.0.11", user="alice", port=2022, tags=("a100",)),
            Host(name="node2", address="10.0.0.12", user="alice", tags=("h100",)),
            Host(name="node3", address="gpu-3.internal", insecure_host_keys=insecure),
            Host(name="node4", address="10.0.0.14", proxy_jump="bastion"),
            Host(name="workstation", address="local", tags=("dev",)),
        ),
    )


def fixed_statuses() -> list[HostStatus]:
    now = FROZEN_NOW
    return [
        HostStatus("node0", HostState.UP, latency_ms=8.4, since=now - 300, last_seen=now),
        HostStatus("node1", HostState.UP, latency_ms=113.0, since=now - 280, last_seen=now),
        HostStatus(
            "node2",
            HostState.DOWN,
            reason="connection refused (10.0.0.12:22)",
            since=now - 95,
            last_seen=now - 97,
        ),
        HostStatus(
            "node3",
            HostState.HOST_KEY_REJECTED,
            reason="host key for gpu-3.internal changed; check it, then remove the old line "
            "from ~/.ssh/known_hosts",
            since=now - 4000,
            last_seen=None,
        ),
        HostStatus(
            "node4",
            HostState.AUTH_FAILED,
            reason="permission denied (publickey)",
            since=now - 12,
            last_seen=None,
        ),
        # workstation stays "connecting": no status arrived for it yet.
    ]
