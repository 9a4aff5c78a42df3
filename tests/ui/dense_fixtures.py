"""256 hosts x 8 GPUs for the dense GPU view, without SSH: fixed, deterministic views.

Every GPU starts from the captured nvidia-smi table of a real 8 x H100 80GB HBM3 host
(tests/data/nvidia-smi, parsed by the console's own parser); only the figures that
make a cluster differ per host are set: utilization, memory in use, temperature, power,
and the processes of four jobs. Same input, same views: snapshots can rely on it.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

from ui_fixtures import FROZEN_NOW

from console.inventory import Host, Inventory
from console.probe.models import GpuProcess, GpuSample, HostSample, HostView
from console.probe.nvsmi_table import parse_table
from console.transport.base import HostState, HostStatus

HOSTS = 256
CAPTURE = Path(__file__).parents[1] / "data" / "nvidia-smi" / "table_h100-80gb-hbm3_8gpu.txt"
# (job, first host, last host, GPUs per host, utilization base)
JOBS = (
    ("llama-70b", 0, 127, 8, 86),
    ("resnet-ddp", 128, 159, 8, 70),
    ("bert-mpi", 160, 175, 8, 45),
    ("eval-sweep", 176, 183, 4, 60),
)
HOT = {(5, 3), (77, 3), (140, 5)}  # (host, gpu) at 88 C
IDLE_UNDER_JOB = {(130, 6)}
MEMORY_FULL = {(140, 2)}
DOWN = (250, 251)
AUTH_FAILED = 252
CONNECTING = 253  # no view, no status: "connecting"


def name(index: int) -> str:
    return f"node{index:03d}"


def dense_inventory(hosts: int = HOSTS) -> Inventory:
    return Inventory(
        path="/srv/cluster/hosts.yaml",
        hosts=tuple(
            Host(
                name=name(i),
                address=f"10.1.{i // 256}.{i % 256}",
                user="alice",
                gpus=8,
                tags=(f"rack{i // 32}", "h100"),
            )
            for i in range(hosts)
        ),
    )


@cache
def captured_gpus() -> tuple[GpuSample, ...]:
    gpus = parse_table(CAPTURE.read_text())
    assert len(gpus) == 8, "the captured table is of an 8-GPU host"
    return gpus


def _job_of(host: int, gpu: int) -> tuple[str, int] | None:
    for job, first, last, per_host, util in JOBS:
        if first <= host <= last and gpu < per_host:
            return job, util
    return None


def _gpu(host: int, base: GpuSample, step: int) -> GpuSample:
    g = base.index
    wobble = (host * 37 + g * 11 + step * 5) % 13
    held = _job_of(host, g)
    total = base.memory_total_mib or 81559.0
    processes: tuple[GpuProcess, ...] = ()
    if held is None:
        util, used = float(wobble % 3), base.memory_used_mib or 1.0
    else:
        job, util_base = held
        first = next(first for j, first, *_ in JOBS if j == job)
        per_host = next(per for j, _f, _l, per, _u in JOBS if j == job)
        util = float(min(100, util_base + wobble))
        used = total * (0.55 + wobble / 50)
        rank = (host - first) * per_host + g
        processes = (
            GpuProcess(
                pid=10_000 + host * 10 + g,
                command=f"python train.py --job {job}",
                user="alice",
                used_memory_mib=used - 600,
                type="C",
                job=job,
                rank=rank,
                local_rank=g,
            ),
        )
    if (host, g) in IDLE_UNDER_JOB:
        util = 0.0
    if (host, g) in MEMORY_FULL:
        used = total * 0.99
    temp = 88.0 if (host, g) in HOT else 30.0 + util * 0.4
    return replace(
        base,
        utilization_gpu=util,
        utilization_memory=util / 3,
        memory_used_mib=round(used),
        temperature_c=temp,
        power_draw_w=round(70 + util * 6.0),
        processes=processes,
    )


def dense_views(step: int = 0, hosts: int = HOSTS, now: float = FROZEN_NOW) -> dict[str, HostView]:
    t = now - 3 + step
    views = {}
    for i in range(hosts):
        if i in (AUTH_FAILED, CONNECTING):
            continue
        sample = HostSample(
            name=name(i),
            time=t,
            gpu_source="nvidia-smi",
            cpu_percent=20.0 + i % 50,
            cpu_count=96,
            load_1m=4.0,
            memory_used_mib=300_000.0,
            memory_total_mib=2_000_000.0,
            host_source="proc",
            gpus=tuple(_gpu(i, base, step) for base in captured_gpus()),
        )
        if i in DOWN:
            views[name(i)] = HostView(
                name(i),
                HostState.DOWN,
                reason="connection lost: keepalive timeout",
                sample=replace(sample, time=now - 125),
                stale=True,
                last_seen=now - 125,
            )
        else:
            views[name(i)] = HostView(name(i), HostState.UP, sample=sample, last_seen=t)
    return views


def dense_statuses(now: float = FROZEN_NOW) -> list[HostStatus]:
    return [
        HostStatus(
            name(AUTH_FAILED),
            HostState.AUTH_FAILED,
            reason="permission denied (publickey)",
            since=now - 60,
        )
    ]
