"""The Prometheus exposition of views and jobs: dcgm-exporter's names and labels, job and
rank labels, figures not reported left out, and the fast renderer equal to
prometheus_client's own ``generate_latest`` (parsed back with prometheus_client's parser).
The views are the console's own frozen dataclasses, as a sampler's line decodes to."""

from __future__ import annotations

import urllib.request

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from console.logs.steps import RankSteps
from console.metrics.collector import ClusterCollector
from console.metrics.exposition import MetricsServer, render_text
from console.metrics.listen import parse_listen
from console.metrics.source import JobFigures, MetricsSource
from console.probe.models import GpuProcess, GpuSample, HostSample, HostView
from console.transport.base import HostState


def gpu(index: int, *, job: str | None = None, rank: int | None = None) -> GpuSample:
    procs = (GpuProcess(pid=100 + index, job=job, rank=rank),) if job else ()
    return GpuSample(
        index=index,
        uuid=f"GPU-{index:04d}",
        name='NVIDIA "H100" 80GB',
        utilization_gpu=50.0 + index,
        memory_used_mib=1000.0,
        memory_total_mib=81559.0,
        temperature_c=40.0,
        power_draw_w=300.5,
        clock_sm_mhz=1980.0,
        ecc_corrected=3,
        processes=procs,
    )


def source_with_cluster() -> MetricsSource:
    source = MetricsSource(clock=lambda: 1000.0)
    node0 = HostSample("node0", 998.0, "nvml", (gpu(0, job="j1", rank=0), gpu(1)))
    node1 = HostSample("node1", 999.5, "nvml", (gpu(0, job="j1", rank=1),))
    source.update_views(
        {
            "node0": HostView("node0", HostState.UP, sample=node0),
            "node1": HostView("node1", HostState.UP, sample=node1),
            "node2": HostView("node2", HostState.DOWN, "connection refused"),
        }
    )
    source.set_jobs([JobFigures("j1", "train", "ddp", "running", restarts=2)])
    rank0 = RankSteps(0, "node0", 0, 40, 0, 100, 2.5, None, 0.25, 999.0, 999.0, 0.4)
    source.set_ranks("j1", [rank0])
    return source


def families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples by family name (prometheus_client's parser calls a counter's samples
    NAME_total; Prometheus itself keeps the name the endpoint wrote)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(family.name, []).append((s.labels, s.value))
    return out


def test_gpu_metrics_carry_dcgm_labels_and_the_job_and_rank_holding_the_gpu() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(source_with_cluster()))
    parsed = families(render_text(registry.collect()))
    util = {(lab["Hostname"], lab["gpu"]): (lab, v) for lab, v in parsed["DCGM_FI_DEV_GPU_UTIL"]}
    assert sorted(util) == [("node0", "0"), ("node0", "1"), ("node1", "0")]
    labels, value = util[("node0", "0")]
    assert value == 50.0
    assert labels == {
        "gpu": "0",
        "UUID": "GPU-0000",
        "device": "nvidia0",
        "modelName": 'NVIDIA "H100" 80GB',
        "Hostname": "node0",
        "job": "j1",
        "rank": "0",
    }
    assert util[("node1", "0")][0]["rank"] == "1"
    assert "job" not in util[("node0", "1")][0]  # idle GPU: no job label
    # FB_FREE is total - used; a figure the GPU did not report is absent, not 0.
    assert {v for _lab, v in parsed["DCGM_FI_DEV_FB_FREE"]} == {80559.0}
    assert "DCGM_FI_DEV_MEM_CLOCK" not in parsed
    assert [v for _lab, v in parsed["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"]] == [3.0, 3.0, 3.0]


def test_distconsole_metrics_hosts_jobs_and_ranks() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(source_with_cluster()))
    parsed = families(render_text(registry.collect()))
    up = {lab["Hostname"]: v for lab, v in parsed["distconsole_host_up"]}
    assert up == {"node0": 1.0, "node1": 1.0, "node2": 0.0}
    age = {lab["Hostname"]: v for lab, v in parsed["distconsole_host_sample_age_seconds"]}
    assert age == {"node0": 2.0, "node1": 0.5}
    assert parsed["distconsole_job_state"] == [
        ({"job": "j1", "name": "train", "kind": "ddp", "state": "running"}, 1.0)
    ]
    assert parsed["distconsole_job_restarts"] == [
        ({"job": "j1", "name": "train", "kind": "ddp"}, 2.0)
    ]
    rank_labels = {"job": "j1", "rank": "0", "Hostname": "node0"}
    assert parsed["distconsole_rank_step"] == [(rank_labels, 40.0)]
    assert parsed["distconsole_rank_steps_per_second"] == [(rank_labels, 2.5)]
    assert parsed["distconsole_rank_loss"] == [(rank_labels, 0.25)]
    assert "distconsole_rank_samples_per_second" not in parsed  # not printed


def test_lowercase_hostname_label_as_newer_dcgm_exporters_write_it() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(source_with_cluster(), hostname_label="hostname"))
    parsed = families(render_text(registry.collect()))
    assert all(
        "hostname" in lab and "Hostname" not in lab for lab, _v in parsed["DCGM_FI_DEV_GPU_UTIL"]
    )


def test_fast_render_is_generate_latest_byte_for_byte_for_gauges() -> None:
    collector = ClusterCollector(source_with_cluster())
    gauges: list[Metric] = [f for f in collector.collect() if f.type == "gauge"]

    class Gauges:
        def collect(self) -> list[Metric]:
            return gauges

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Gauges())
    assert render_text(gauges) == generate_latest(registry).decode()


def test_counters_keep_dcgm_exporter_names() -> None:
    text = render_text(ClusterCollector(source_with_cluster()).collect())
    assert "# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL counter\n" in text
    assert "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL_total" not in text


def test_server_answers_a_scrape_over_http() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(source_with_cluster()))
    server = MetricsServer(registry, "127.0.0.1", 0).start()
    try:
        host, port = server.address
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
            assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text = answer.read().decode()
    finally:
        server.close()
    assert "DCGM_FI_DEV_GPU_UTIL" in families(text)


def test_parse_listen() -> None:
    assert parse_listen("0.0.0.0:9400") == ("0.0.0.0", 9400)
    assert parse_listen("9401") == ("127.0.0.1", 9401)
    assert parse_listen(":9402") == ("127.0.0.1", 9402)
    assert parse_listen("[::1]:9403") == ("::1", 9403)


def test_health_reading_and_verdicts_exported() -> None:
    from console.probe.health_models import GpuHealth, HostHealth, XidEvent

    health = HostHealth(
        "nvml",
        999.0,
        gpus=(
            GpuHealth(0, pci_bus_id="00000000:18:00.0", ecc_uncorrected_aggregate=0),
            GpuHealth(1, pci_bus_id="00000000:2A:00.0", remapped_rows_failure="Yes"),
        ),
        xids=(XidEvent(990.0, 79, None, 0, "GPU has fallen off the bus", "nvml"),),
    )
    source = MetricsSource(clock=lambda: 1000.0)
    sample = HostSample("node0", 999.0, "nvml", (gpu(0), gpu(1)), health=health)
    source.update_views(
        {
            "node0": HostView("node0", HostState.UP, sample=sample),
            "node1": HostView("node1", HostState.DOWN, "connection refused"),
        }
    )
    parsed = families(render_text(ClusterCollector(source).collect()))
    util = {lab["gpu"]: lab for lab, _v in parsed["DCGM_FI_DEV_GPU_UTIL"]}
    assert util["0"]["pci_bus_id"] == "00000000:18:00.0"
    assert parsed["DCGM_FI_DEV_XID_ERRORS"] == [(util["0"], 79.0)]
    assert parsed["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == [(util["1"], 1.0)]
    assert [v for _lab, v in parsed["DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"]] == [0.0]
    verdicts = {lab["gpu"]: (lab["state"], v) for lab, v in parsed["distconsole_gpu_health"]}
    assert verdicts == {"0": ("fail", 2.0), "1": ("fail", 2.0)}
    hosts = {lab["Hostname"]: (lab["state"], v) for lab, v in parsed["distconsole_host_health"]}
    # Every host has a series (0 while nothing is found on the host itself; its GPUs'
    # failures are the GPU series above), so a dashboard never loses a host's line.
    assert hosts == {"node0": ("ok", 0.0), "node1": ("fail", 2.0)}
