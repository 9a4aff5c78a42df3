"""dcgm-exporter's metric names, types, help texts and labels, for the GPU figures a
sampler reports.

Names and help texts are those of dcgm-exporter's ``etc/default-counters.csv``
(NVIDIA/dcgm-exporter); the ECC volatile totals are its commented-out
``DCGM_FI_DEV_ECC_SBE_VOL_TOTAL`` / ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` lines, as a
counters file that enables them names them. Labels are those its renderer writes on
every GPU metric (``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``,
``Hostname``); ``pci_bus_id`` where the sampler's health reading has it. dcgm-exporter
4.4.2-4.7.0 renamed ``Hostname`` to ``hostname`` (its #655); ``HOSTNAME_LABELS`` lets a
user pick the spelling their dashboards use, ``Hostname`` by default. A GPU a
distconsole job holds also carries ``job`` and ``rank`` (as dcgm-exporter adds
``pod``/``namespace`` inside Kubernetes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from console.probe.models import GpuSample

HOSTNAME_LABEL = "Hostname"
HOSTNAME_LABELS = ("Hostname", "hostname")


def _fb_free(g: GpuSample) -> float | None:
    if g.memory_used_mib is None or g.memory_total_mib is None:
        return None
    return max(0.0, g.memory_total_mib - g.memory_used_mib)


def _attr(name: str) -> Callable[[GpuSample], float | None]:
    def read(g: GpuSample) -> float | None:
        value = getattr(g, name)
        return None if value is None else float(value)

    read.__name__ = f"read_{name}"
    return read


@dataclass(frozen=True, slots=True)
class DcgmField:
    name: str
    type: str  # "gauge" or "counter", as in default-counters.csv
    help: str
    read: Callable[[GpuSample], float | None]


DCGM_FIELDS: tuple[DcgmField, ...] = (
    DcgmField(
        "DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", _attr("clock_sm_mhz")
    ),
    DcgmField(
        "DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", _attr("clock_mem_mhz")
    ),
    DcgmField("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", _attr("temperature_c")),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", _attr("power_draw_w")),
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", _attr("utilization_gpu")),
    DcgmField(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "gauge",
        "Memory utilization (in %).",
        _attr("utilization_memory"),
    ),
    DcgmField("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", _fb_free),
    DcgmField(
        "DCGM_FI_DEV_FB_USED",
        "gauge",
        "Framebuffer memory used (in MiB).",
        _attr("memory_used_mib"),
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Total number of single-bit volatile ECC errors.",
        _attr("ecc_corrected"),
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        _attr("ecc_uncorrected"),
    ),
)


def gpu_labels(
    host: str, g: GpuSample, hostname_label: str = HOSTNAME_LABEL, pci_bus_id: str | None = None
) -> dict[str, str]:
    """dcgm-exporter's labels of one GPU, with ``job`` and ``rank`` where a job holds it.

    A GPU shared by several processes of one job lists their ranks (``"0,1"``); with
    processes of several jobs, the first job seen (in the driver's order) is named.
    """
    labels = {
        "gpu": str(g.index),
        "UUID": g.uuid or "",
        "device": f"nvidia{g.index}",
        "modelName": g.name or "",
        hostname_label: host,
    }
    if pci_bus_id:
        labels["pci_bus_id"] = pci_bus_id
    job: str | None = None
    ranks: list[int] = []
    for p in g.processes:
        if p.job is None or (job is not None and p.job != job):
            continue
        job = p.job
        if p.rank is not None and p.rank not in ranks:
            ranks.append(p.rank)
    if job is not None:
        labels["job"] = job
        if ranks:
            labels["rank"] = ",".join(str(r) for r in sorted(ranks))
    return labels
