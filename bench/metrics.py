"""The Prometheus endpoint's scrape cost: ``distconsole metrics`` at N hosts x 8 GPUs.

Every scrape reads fresh views (new sample objects, as a 1 Hz sampler gives between
scrapes) of N hosts x 8 GPUs, half of them held by one job (job and rank labels), plus
that job's per-rank steps, loss and rates. Timed per scrape, in this process:

- ours: ``ClusterCollector`` + ``render_text`` (each GPU's label set written once);
- generate_latest: the same collector through prometheus_client's ``generate_latest``
  (sorts and escapes every label of every sample);
- gauges: the usual instrumented exporter: one labelled ``Gauge`` per metric, every
  GPU's figures ``.labels(...).set()`` on every sample batch (``update`` column, paid
  once per batch, i.e. per second), ``generate_latest`` per scrape;
- http: a GET of ``/metrics`` from our ``MetricsServer`` on 127.0.0.1 (wall, with the
  request; gzip as Prometheus asks, and plain).

Printed: median and p95 ms per scrape, series and bytes, and the ratios to ours. Target:
a scrape at 64 hosts x 8 GPUs in <= 50 ms.

    python bench/metrics.py [--hosts 8,64,256] [--repeat 30]
"""

from __future__ import annotations

import argparse
import statistics
import time
import urllib.request
from collections.abc import Callable

from common import GPUS_PER_HOST, fmt, host_counts, positive_int, print_header
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from console.logs.steps import RankSteps
from console.metrics.collector import ClusterCollector
from console.metrics.dcgm import DCGM_FIELDS, gpu_labels
from console.metrics.exposition import MetricsServer, registry_text
from console.metrics.source import JobFigures, MetricsSource
from console.probe.models import GpuProcess, GpuSample, HostSample, HostView
from console.transport.base import HostState

JOB = "ddp-20261126-120000-abcd"


def views(hosts: int, tick: int) -> dict[str, HostView]:
    """Fresh views of every host (new objects each tick, figures moving)."""
    out = {}
    now = time.time()
    for h in range(hosts):
        gpus = []
        for g in range(GPUS_PER_HOST):
            rank = h * GPUS_PER_HOST + g
            held = h < hosts // 2
            procs = (GpuProcess(pid=1000 + g, job=JOB, rank=rank, local_rank=g),) if held else ()
            gpus.append(
                GpuSample(
                    index=g,
                    uuid=f"GPU-{h:04x}{g:04x}-aaaa-bbbb-cccc-{rank:012x}",
                    name="NVIDIA H100 80GB HBM3",
                    utilization_gpu=float((tick + rank) % 101),
                    utilization_memory=40.0,
                    memory_used_mib=60000.0 + tick % 7,
                    memory_total_mib=81559.0,
                    temperature_c=55.0 + g,
                    power_draw_w=500.0 + tick % 13,
                    power_limit_w=700.0,
                    clock_sm_mhz=1980.0,
                    clock_mem_mhz=2619.0,
                    ecc_corrected=0,
                    ecc_uncorrected=0,
                    processes=procs,
                )
            )
        name = f"node{h}"
        sample = HostSample(name, now, "nvml", tuple(gpus), cpu_percent=12.0)
        out[name] = HostView(name, HostState.UP, sample=sample)
    return out


def ranks(hosts: int, tick: int) -> list[RankSteps]:
    count = (hosts // 2) * GPUS_PER_HOST
    return [
        RankSteps(r, f"node{r // GPUS_PER_HOST}", r % GPUS_PER_HOST, 100 + tick, 0, None,
                  3.2, 1024.0, 0.5 / (tick + 1), time.time(), time.time(), 0.3)
        for r in range(count)
    ]  # fmt: skip


def source(hosts: int) -> MetricsSource:
    src = MetricsSource()
    src.set_jobs([JobFigures(JOB, "train", "ddp", "running")])
    return src


def timed(repeat: int, before: Callable[[int], None], scrape: Callable[[], object]) -> list[float]:
    out = []
    for tick in range(repeat):
        before(tick)
        t0 = time.perf_counter()
        scrape()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def gauges_registry() -> tuple[CollectorRegistry, dict[str, Gauge]]:
    registry = CollectorRegistry(auto_describe=False)
    labels = ("gpu", "UUID", "device", "modelName", "Hostname", "job", "rank")
    made = {f.name: Gauge(f.name, f.help, labels, registry=registry) for f in DCGM_FIELDS}
    return registry, made


def update_gauges(gauges: dict[str, Gauge], batch: dict[str, HostView]) -> None:
    for view in batch.values():
        assert view.sample is not None
        for g in view.sample.gpus:
            labels = gpu_labels(view.name, g)
            names = ("gpu", "UUID", "device", "modelName", "Hostname")
            values = [labels[n] for n in names] + [labels.get("job", ""), labels.get("rank", "")]
            for f in DCGM_FIELDS:
                value = f.read(g)
                if value is not None:
                    gauges[f.name].labels(*values).set(value)


def run(hosts: int, repeat: int) -> dict[str, list[float] | float | int]:
    src = source(hosts)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(src))

    def fresh(tick: int) -> None:
        src.update_views(views(hosts, tick))
        src.set_ranks(JOB, ranks(hosts, tick))

    ours = timed(repeat, fresh, lambda: registry_text(registry))
    naive = timed(repeat, fresh, lambda: generate_latest(registry))
    text = registry_text(registry)
    g_registry, gauges = gauges_registry()
    updates: list[float] = []

    def set_all(tick: int) -> None:
        batch = views(hosts, tick)
        t0 = time.perf_counter()
        update_gauges(gauges, batch)
        updates.append((time.perf_counter() - t0) * 1000)

    instrumented = timed(repeat, set_all, lambda: generate_latest(g_registry))
    server = MetricsServer(registry, "127.0.0.1", 0).start()
    url = "http://{}:{}/metrics".format(*server.address)

    def get(gzip: bool) -> bytes:
        request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"} if gzip else {})
        with urllib.request.urlopen(request, timeout=30) as answer:
            return bytes(answer.read())

    try:
        http_gzip = timed(repeat, fresh, lambda: get(True))
        http_plain = timed(repeat, fresh, lambda: get(False))
        gz_bytes = len(get(True))
    finally:
        server.close()
    series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    return {
        "ours": ours, "generate_latest": naive, "gauges": instrumented, "update": updates,
        "http_gzip": http_gzip, "http_plain": http_plain,
        "series": series, "bytes": len(text.encode()), "gz_bytes": gz_bytes,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=host_counts("8,64", 1024), default=[8, 64, 256])
    parser.add_argument("--repeat", type=positive_int, default=30)
    args = parser.parse_args()
    print_header(
        f"{'hosts':>5} {'GPUs':>5} {'series':>7} {'KiB':>6} {'gz KiB':>6}  {'mode':<16}"
        f"{'scrape ms':>10} {'p95 ms':>8} {'x ours':>7}"
    )
    for hosts in args.hosts:
        r = run(hosts, args.repeat)
        base = statistics.median(r["ours"])  # type: ignore[arg-type]
        size: int = r["bytes"]  # type: ignore[assignment]
        gz: int = r["gz_bytes"]  # type: ignore[assignment]
        head = (
            f"{hosts:>5} {hosts * GPUS_PER_HOST:>5} {r['series']:>7} "
            f"{size / 1024:>6.0f} {gz / 1024:>6.0f}  "
        )
        for mode in ("ours", "generate_latest", "gauges", "update", "http_gzip", "http_plain"):
            values: list[float] = r[mode]  # type: ignore[assignment]
            median = statistics.median(values)
            ratio = fmt(median / base, ".1f") if mode != "update" else "-"
            label = "gauges: set all" if mode == "update" else mode
            print(f"{head}{label:<16}{median:>10.1f} {p95(values):>8.1f} {ratio:>7}")
            head = " " * len(head)
    print("target: a scrape at 64 hosts x 8 GPUs in <= 50 ms (ours)")


if __name__ == "__main__":
    main()
