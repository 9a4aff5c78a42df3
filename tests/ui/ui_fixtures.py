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


# -- GPU views for the cluster screen (fixed figures, shaped like real A100/H100 samples) --

from console.probe.models import GpuProcess, GpuSample, HostSample, HostView  # noqa: E402


def _gpu(index: int, util: float, used: float, temp: float, **extra: object) -> GpuSample:
    fields: dict[str, object] = {
        "index": index,
        "uuid": f"GPU-{index:08x}-0000-0000-0000-000000000000",
        "name": "NVIDIA A100-SXM4-80GB",
        "utilization_gpu": util,
        "utilization_memory": util / 2,
        "memory_used_mib": used,
        "memory_total_mib": 81920.0,
        "temperature_c": temp,
        "power_draw_w": 90 + 3 * util,
        "power_limit_w": 400.0,
        "pstate": "P0",
        "clock_sm_mhz": 1410.0,
        "clock_mem_mhz": 1593.0,
        "ecc_corrected": 0,
        "ecc_uncorrected": 0,
        "mig_mode": "Disabled",
    }
    fields.update(extra)
    return GpuSample(**fields)  # type: ignore[arg-type]


def _rank(pid: int, rank: int, used: float) -> GpuProcess:
    return GpuProcess(
        pid=pid,
        command="python train.py --epochs 10",
        user="alice",
        used_memory_mib=used,
        type="C",
        job="resnet-ddp",
        rank=rank,
        local_rank=rank % 4,
    )


def gpu_views(step: int = 0, now: float = FROZEN_NOW) -> dict[str, HostView]:
    """node0 trains (4 ranks, one GPU idle under the job), node1 has a hot and a full GPU,
    node2 is idle, node3 went down 2 minutes ago (its last sample is kept, stale)."""
    t = now - 3 + step
    wobble = (step * 7) % 20
    node0 = HostSample(
        name="node0",
        time=t,
        gpu_source="nvml",
        cpu_percent=42.0,
        cpu_count=64,
        load_1m=12.5,
        memory_used_mib=200_000.0,
        memory_total_mib=515_000.0,
        net_rx_bytes_s=1.5e8,
        net_tx_bytes_s=1.4e8,
        disk_read_bytes_s=2.0e6,
        disk_write_bytes_s=0.0,
        host_source="psutil",
        gpus=(
            _gpu(0, 80 + wobble, 60_000, 66, processes=(_rank(4100, 0, 59_000),)),
            _gpu(1, 75 + wobble, 60_000, 64, processes=(_rank(4101, 1, 59_000),)),
            _gpu(2, 90 - wobble, 60_000, 69, processes=(_rank(4102, 2, 59_000),)),
            _gpu(3, 0, 60_000, 41, processes=(_rank(4103, 3, 59_000),)),
        ),
    )
    node1 = HostSample(
        name="node1",
        time=t,
        gpu_source="nvidia-smi",
        cpu_percent=12.0,
        cpu_count=64,
        load_1m=3.0,
        memory_used_mib=100_000.0,
        memory_total_mib=515_000.0,
        host_source="proc",
        gpus=(
            _gpu(0, 99, 81_000, 91, processes=(
                GpuProcess(pid=777, command="/usr/bin/python3 bench.py", user="bob",
                           used_memory_mib=80_900.0),
            )),
            _gpu(1, 10 + wobble, 4_000, 45, fan_percent=None, power_draw_w=None),
        ),
    )  # fmt: skip
    node2 = HostSample(
        name="node2",
        time=t,
        gpu_source="nvml",
        cpu_percent=1.0,
        cpu_count=32,
        load_1m=0.1,
        memory_used_mib=8_000.0,
        memory_total_mib=256_000.0,
        gpus=(_gpu(0, 0, 0, 30), _gpu(1, 0, 0, 31)),
    )
    node3 = HostSample(name="node3", time=now - 125, gpu_source="nvml", gpus=(_gpu(0, 50, 9, 50),))
    from console.transport.base import HostState

    return {
        "node0": HostView("node0", HostState.UP, sample=node0, last_seen=t),
        "node1": HostView("node1", HostState.UP, sample=node1, last_seen=t),
        "node2": HostView("node2", HostState.UP, sample=node2, last_seen=t),
        "node3": HostView(
            "node3",
            HostState.DOWN,
            reason="connection lost: keepalive timeout",
            sample=node3,
            stale=True,
            last_seen=now - 125,
        ),
    }


def gpu_inventory() -> Inventory:
    return Inventory(
        path="/srv/cluster/hosts.yaml",
        hosts=(
            Host(name="node0", address="10.0.0.10", user="alice", tags=("a100", "rack1")),
            Host(name="node1", address="10.0.0.11", user="alice", tags=("a100", "rack2")),
            Host(name="node2", address="10.0.0.12", user="alice", tags=("a100", "spare")),
            Host(name="node3", address="10.0.0.13", user="alice", tags=("a100", "rack1")),
        ),
    )
