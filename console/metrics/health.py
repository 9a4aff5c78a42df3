"""What the GPU health reading adds to the endpoint (``console/probe/health.py``):

- dcgm-exporter's names for what the sampler's health record holds:
  ``DCGM_FI_DEV_XID_ERRORS`` (the last Xid of the GPU), ``DCGM_FI_DEV_ECC_SBE_AGG_TOTAL``
  / ``DCGM_FI_DEV_ECC_DBE_AGG_TOTAL`` (the board's lifetime ECC totals) and
  ``DCGM_FI_DEV_ROW_REMAP_FAILURE`` (1 when row remapping failed);
- ``distconsole_gpu_health``: each GPU's verdict, 0 ok, 1 warn, 2 fail (labels: the
  GPU's, plus ``state``), and ``distconsole_host_health`` for a host-level verdict
  (down, no sample, the GPU reader not answering).

The verdicts' "since when" lives in a :class:`HealthTracker` the collector keeps; a lock
keeps two scrapes at once from updating it together.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from console.metrics.source import Snapshot
from console.probe.health import RANK, HealthTracker, cluster_verdicts
from console.probe.health_models import GpuHealth, HostHealth

# (name, type, help, reading) of the health record's figures, as dcgm-exporter names them.
HealthReading = Callable[[GpuHealth, HostHealth], float | None]


def _last_xid(h: GpuHealth, health: HostHealth) -> float | None:
    xids = [x for x in health.xids if x.gpu == h.index]
    return float(max(xids, key=lambda x: x.time).xid) if xids else None


def _int(name: str) -> HealthReading:
    def read(h: GpuHealth, _health: HostHealth) -> float | None:
        value = getattr(h, name)
        return None if value is None else float(value)

    return read


def _remap_failed(h: GpuHealth, _health: HostHealth) -> float | None:
    if h.remapped_rows_failure is None:
        return None
    return 1.0 if h.remapped_rows_failure.strip().lower() == "yes" else 0.0


HEALTH_FIELDS: tuple[tuple[str, str, str, HealthReading], ...] = (
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", _last_xid),
    (
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "counter",
        "Total number of single-bit persistent ECC errors.",
        _int("ecc_corrected_aggregate"),
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "Total number of double-bit persistent ECC errors.",
        _int("ecc_uncorrected_aggregate"),
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gauge",
        "Whether remapping of rows has failed",
        _remap_failed,
    ),
)


class HealthExport:
    def __init__(self, hostname_label: str) -> None:
        self.hostname_label = hostname_label
        self.tracker = HealthTracker()
        self._lock = threading.Lock()

    def families(
        self, snap: Snapshot, labels_of: Mapping[tuple[str, int], dict[str, str]]
    ) -> Iterator[Metric]:
        """``labels_of``: (host, GPU index) -> that GPU's dcgm labels (shared dicts)."""
        readings = [Metric(name, doc, typ) for name, typ, doc, _read in HEALTH_FIELDS]
        for view in snap.views:
            health = view.sample.health if view.sample is not None else None
            if health is None:
                continue
            for h in health.gpus:
                labels = labels_of.get((view.name, h.index))
                if labels is None:
                    continue
                for family, (_n, _t, _d, read) in zip(readings, HEALTH_FIELDS, strict=True):
                    value = read(h, health)
                    if value is not None:
                        family.samples.append(Sample(family.name, labels, value))
        yield from readings
        gpu = Metric("distconsole_gpu_health", "The GPU's health: 0 ok, 1 warn, 2 fail.", "gauge")
        host = Metric(
            "distconsole_host_health",
            "A host-level health verdict (down, no sample, GPU reader not answering): "
            "0 ok, 1 warn, 2 fail.",
            "gauge",
        )
        with self._lock:
            verdicts = cluster_verdicts(snap.views, snap.taken, self.tracker)
        # Every host has a series, 0 while nothing is found about it: a series that only
        # appears on trouble cannot be alerted on as "absent" nor graphed next to its peers.
        findings = {v.host: v for v in verdicts if v.gpu is None}
        for view in snap.views:
            found = findings.get(view.name)
            state = found.state if found is not None else "ok"
            labels = {self.hostname_label: view.name, "state": state}
            host.samples.append(Sample(host.name, labels, float(RANK[state])))
        for v in verdicts:
            value = float(RANK[v.state])
            if v.gpu is None:
                continue
            base = labels_of.get((v.host, v.gpu))
            if base is not None:
                labels = {**base, "state": v.state}
                gpu.samples.append(Sample(gpu.name, labels, value))
        yield gpu
        yield host
