"""The program ``distconsole validate`` sends to each host (``python3 -u - JSON``).

Standard library at import; torch is imported inside, lazily, so a host without torch
answers one clear ``{"error": ...}`` line instead of a traceback. Output: the hello
(``{"program": "validate", "v": VERSION}``), ``{"pgid": N}`` (the console kills that
process group if it is interrupted), progress lines ``{"phase": ...}``, then one
``{"result": {...}}`` or ``{"error": "..."}`` line.

Modes (the JSON argument's ``mode``):
- ``compute``: per host CPU fp32 matmul GFLOPS (a fixed thread count, reported) and
  memory copy bandwidth; per GPU bf16 matmul TFLOPS, device copy bandwidth, pinned
  host->device and device->host bandwidth; with >= 2 GPUs NCCL all-reduce bus bandwidth
  across them. Also the CPU quota of the process's cgroup and how often it throttled.
- ``allreduce``: one rank of a gloo all-reduce over ``world`` hosts; rank 0 serves the
  TCPStore on a free port (printed as ``{"port": N}``), every rank binds gloo to the
  inventory address it is given.
- ``links``: ``allreduce`` tests read from stdin one JSON line at a time, each answered
  by ``{"result"|"error", "id"}`` (torch imported once); ends at stdin's EOF.

Every figure is the median of several windows of >= ``window_s`` each: a CPU quota (cgroup
cfs_quota_us per 100 ms period) only shows over windows much longer than its period, and a
best-of short runs would escape it.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

PROGRAM = "validate"
VERSION = 1


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def windows(step: Callable[[], float], window_s: float, count: int) -> list[float]:
    """Per-window rates: ``step`` does one unit of work and returns the amount it did
    (flops, bytes); each window runs steps for at least ``window_s`` of wall time."""
    rates = []
    for _ in range(count):
        done = 0.0
        start = time.perf_counter()
        while True:
            done += step()
            elapsed = time.perf_counter() - start
            if elapsed >= window_s:
                break
        rates.append(done / elapsed)
    return rates


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def cgroup_cpu() -> dict[str, Any]:
    """This process's CPU limit: cgroup v1 ``cpu`` controller or v2 ``cpu.max``."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers, path = parts[1].split(","), parts[2]
        if "cpu" in controllers:
            base = "/sys/fs/cgroup/cpu" + path
            quota = _read_int(base + "/cpu.cfs_quota_us")
            period = _read_int(base + "/cpu.cfs_period_us")
            return _limit(base, quota, period)
        if parts[1] == "" and os.path.exists("/sys/fs/cgroup/cpu.max"):
            base = "/sys/fs/cgroup" + path
            try:
                with open(base + "/cpu.max", encoding="utf-8") as f:
                    words = f.read().split()
            except OSError:
                continue
            quota = int(words[0]) if words and words[0] != "max" else None
            period = int(words[1]) if len(words) > 1 else None
            return _limit(base, quota, period)
    return {}


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="utf-8") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _limit(base: str, quota: int | None, period: int | None) -> dict[str, Any]:
    found: dict[str, Any] = {"cgroup": base}
    if quota is not None and quota > 0 and period:
        found["quota_cpus"] = round(quota / period, 3)
    return found


def throttle_stat(base: str) -> tuple[int, int]:
    """(periods, throttled periods) of the cgroup, (0, 0) when unreadable."""
    values: dict[str, int] = {}
    try:
        with open(base + "/cpu.stat", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(" ")
                if value.strip().isdigit():
                    values[key] = int(value)
    except OSError:
        return 0, 0
    return values.get("nr_periods", 0), values.get("nr_throttled", 0)


def cpu_figures(torch: Any, cfg: dict[str, Any]) -> dict[str, Any]:
    threads = int(cfg.get("threads", 1))
    torch.set_num_threads(threads)
    window_s, count = float(cfg["window_s"]), int(cfg["windows"])
    n = int(cfg.get("cpu_matrix", 256))
    a, b = torch.randn(n, n), torch.randn(n, n)

    def matmul() -> float:
        torch.mm(a, b)
        return 2.0 * n**3

    limit = cgroup_cpu()
    before = throttle_stat(limit["cgroup"]) if "cgroup" in limit else (0, 0)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    flops = windows(matmul, window_s, count)
    cpu_share = (time.process_time() - cpu0) / max(time.perf_counter() - wall0, 1e-9)
    after = throttle_stat(limit["cgroup"]) if "cgroup" in limit else (0, 0)
    size = int(cfg.get("copy_mb", 64)) * (1 << 20) // 4
    src, dst = torch.ones(size), torch.empty(size)

    def copy() -> float:
        dst.copy_(src)
        return 2.0 * size * 4  # read + write

    figures: dict[str, Any] = {
        "cpu_gflops": round(median(flops) / 1e9, 3),
        "cpu_threads": threads,
        "mem_gbps": round(median(windows(copy, window_s, count)) / 1e9, 3),
        "cpu_share": round(cpu_share / threads, 3),  # CPU time per thread per wall second
        "cpus": os.cpu_count() or 0,
    }
    if "quota_cpus" in limit:
        figures["cpu_quota_cpus"] = limit["quota_cpus"]
    periods, throttled = after[0] - before[0], after[1] - before[1]
    if periods > 0:
        figures["cpu_throttled_fraction"] = round(throttled / periods, 3)
    return figures


def synced(torch: Any, dev: Any, work: Callable[[], Any], amount: float) -> Callable[[], float]:
    """A window step that waits for the GPU, so a window measures work done, not queued."""

    def step() -> float:
        work()
        torch.cuda.synchronize(dev)
        return amount

    return step


def gpu_matmul(torch: Any, dev: Any, n: int, window_s: float, count: int) -> list[float]:
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    step = synced(torch, dev, lambda: torch.mm(a, b), 2.0 * n**3)
    step()  # warm-up (cuBLAS handles, clocks)
    return windows(step, window_s, count)


def gpu_copy(torch: Any, dev: Any, size: int, window_s: float, count: int) -> list[float]:
    src = torch.empty(size, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    return windows(synced(torch, dev, lambda: dst.copy_(src), 2.0 * size), window_s, count)


def host_copies(
    torch: Any, dev: Any, size: int, window_s: float, count: int
) -> tuple[list[float], list[float]]:
    pinned = torch.empty(size, dtype=torch.uint8).pin_memory()
    on_dev = torch.empty(size, dtype=torch.uint8, device=dev)
    h2d = synced(torch, dev, lambda: on_dev.copy_(pinned, non_blocking=True), size)
    d2h = synced(torch, dev, lambda: pinned.copy_(on_dev, non_blocking=True), size)
    return windows(h2d, window_s, count), windows(d2h, window_s, count)


def gpu_figures(torch: Any, cfg: dict[str, Any], index: int) -> dict[str, Any]:
    """One GPU's figures (only on a host with CUDA; code path not run on CPU-only CI)."""
    window_s, count = float(cfg["window_s"]), int(cfg["windows"])
    dev = torch.device("cuda", index)
    tflops = gpu_matmul(torch, dev, int(cfg.get("gpu_matrix", 8192)), window_s, count)
    dev_bw = gpu_copy(torch, dev, int(cfg.get("gpu_copy_mb", 1024)) << 20, window_s, count)
    host_size = int(cfg.get("host_copy_mb", 256)) << 20
    h2d, d2h = host_copies(torch, dev, host_size, window_s, count)
    return {
        "name": torch.cuda.get_device_name(index),
        "matmul_tflops": round(median(tflops) / 1e12, 2),
        "dev_mem_gbps": round(median(dev_bw) / 1e9, 1),
        "h2d_gbps": round(median(h2d) / 1e9, 2),
        "d2h_gbps": round(median(d2h) / 1e9, 2),
    }


def nccl_busbw(torch: Any, cfg: dict[str, Any], count_gpus: int) -> float:
    """All-reduce bus bandwidth across this host's GPUs, one process (torch.cuda.nccl)."""
    from torch.cuda import nccl

    size = int(cfg.get("nccl_mb", 256)) << 20
    tensors = [torch.ones(size // 4, device=torch.device("cuda", i)) for i in range(count_gpus)]

    def step() -> float:
        nccl.all_reduce(tensors)
        for i in range(count_gpus):
            torch.cuda.synchronize(i)
        return 2.0 * (count_gpus - 1) / count_gpus * size

    step()
    return median(windows(step, float(cfg["window_s"]), int(cfg["windows"]))) / 1e9


def compute(torch: Any, cfg: dict[str, Any]) -> dict[str, Any]:
    emit({"phase": "cpu"})
    result: dict[str, Any] = {"host": cpu_figures(torch, cfg), "gpus": []}
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for index in range(gpus):
        emit({"phase": f"gpu {index}"})
        result["gpus"].append(gpu_figures(torch, cfg, index))
    if gpus >= 2:
        emit({"phase": "nccl"})
        result["host"]["nccl_busbw_gbps"] = round(nccl_busbw(torch, cfg, gpus), 1)
    return result


def allreduce(torch: Any, cfg: dict[str, Any]) -> dict[str, Any]:
    from datetime import timedelta

    import torch.distributed as dist

    rank, world = int(cfg["rank"]), int(cfg["world"])
    timeout = timedelta(seconds=float(cfg.get("timeout_s", 120)))
    if rank == 0:
        store = dist.TCPStore(
            cfg["address"], 0, world, is_master=True, timeout=timeout, wait_for_workers=False
        )
        emit({"port": store.port, "id": cfg.get("id")})
    else:
        store = dist.TCPStore(cfg["master"], int(cfg["port"]), world, False, timeout=timeout)
    options = dist.ProcessGroupGloo._Options()
    # Bind to the inventory's address, not whatever the machine's hostname resolves to.
    options._devices = [dist.ProcessGroupGloo.create_device(hostname=cfg["address"])]
    options._timeout = timeout
    group = dist.ProcessGroupGloo(store, rank, world, options)
    size = int(cfg.get("allreduce_mb", 16)) << 20
    tensor = torch.ones(size // 4)
    factor = 2.0 * (world - 1) / world

    def step() -> float:
        group.allreduce([tensor]).wait()
        return factor * size

    step()
    # Every rank runs the same number of windows; a fixed count keeps the ranks in step.
    rates = windows_fixed(step, float(cfg["window_s"]), int(cfg["windows"]), group, torch)
    return {"busbw_gbps": round(median(rates) / 1e9, 4), "world": world, "size_mb": size >> 20}


def windows_fixed(
    step: Callable[[], float], window_s: float, count: int, group: Any, torch: Any
) -> list[float]:
    """Like :func:`windows`, with every rank running the same number of steps per window
    so no rank waits in a collective the others never enter: each rank times one step,
    the ranks agree on the largest step count that fills a window (an all-reduce max),
    and all run that many."""
    rates = []
    for _ in range(count):
        start = time.perf_counter()
        step()
        one = max(time.perf_counter() - start, 1e-6)
        agreed = torch.tensor([float(min(10_000, max(2, int(window_s / one) + 1)))])
        group.allreduce([agreed], dist_max(torch)).wait()
        done = 0.0
        start = time.perf_counter()
        for _step in range(int(agreed.item())):
            done += step()
        rates.append(done / (time.perf_counter() - start))
    return rates


def dist_max(torch: Any) -> Any:
    import torch.distributed as dist

    options = dist.AllreduceOptions()
    options.reduceOp = dist.ReduceOp.MAX
    return options


def links(torch: Any, cfg: dict[str, Any]) -> None:
    """Serve all-reduce tests read from stdin, one JSON line each (rank, world, address,
    master, port, id), until stdin ends: torch is imported once for every link test, and
    the console going away (EOF) ends the program."""
    emit({"ready": True})
    for line in sys.stdin:
        if not line.strip():
            continue
        test = {**cfg, **json.loads(line)}
        try:
            emit({"result": allreduce(torch, test), "id": test.get("id")})
        except Exception as exc:  # this test failed; the next may run
            emit({"error": f"{type(exc).__name__}: {exc}", "id": test.get("id")})


def main(argv: list[str]) -> int:
    emit({"program": PROGRAM, "v": VERSION})
    cfg = json.loads(argv[1]) if len(argv) > 1 else {}
    with contextlib.suppress(OSError):  # already a group leader
        os.setsid()  # its own process group, for the console to end it whole
    emit({"pgid": os.getpgrp()})
    try:
        import torch
    except ImportError as exc:
        emit({"error": f"torch is not importable with {sys.executable}: {exc}"})
        return 3
    try:
        if cfg.get("mode") == "links":
            links(torch, cfg)
        elif cfg.get("mode") == "allreduce":
            emit({"result": allreduce(torch, cfg)})
        else:
            emit({"result": compute(torch, cfg)})
    except Exception as exc:  # every failure is one line the console shows for this host
        emit({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
