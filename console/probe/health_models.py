"""What a sampler reports of its GPUs' health: frozen dataclasses, decoded from a sample
line's ``health`` record (``console/hostprogs/sampler/schema.py`` HEALTH_KEYS).

NVML sends typed records; the nvidia-smi path sends its raw ``--query-gpu`` CSV rows,
read here with the nvidia-smi value rules (``[N/A]`` and friends: not reported, never 0).
The verdict drawn from them is ``console/probe/health.py``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from console.hostprogs.sampler.health_rules import pci_key
from console.hostprogs.sampler.schema import HEALTH_FIELDS, XID_FIELDS, names
from console.probe import values

# nvidia-smi name -> (GpuHealth attribute, type); older drivers' names too
_BY_QUERY = {query: (attr, kind) for attr, kind, query in HEALTH_FIELDS if query}
_BY_QUERY["clocks_throttle_reasons.active"] = _BY_QUERY["clocks_event_reasons.active"]


@dataclass(frozen=True, slots=True)
class GpuHealth:
    index: int
    pci_bus_id: str | None = None
    ecc_uncorrected_volatile: int | None = None  # since the last driver load / GPU reset
    ecc_uncorrected_aggregate: int | None = None  # the board's lifetime
    ecc_corrected_volatile: int | None = None
    ecc_corrected_aggregate: int | None = None
    retired_pages_pending: str | None = None  # "Yes" / "No"
    remapped_rows_pending: str | None = None
    remapped_rows_failure: str | None = None
    recovery_action: str | None = None  # None: none asked for
    clock_events: int | None = None  # NVML's clocks event reasons bit mask
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    fan: str | None = None  # "ERR!" when the fan (or its sensor) failed
    nvlink_active: int | None = None
    nvlink_inactive: int | None = None


@dataclass(frozen=True, slots=True)
class XidEvent:
    time: float  # epoch seconds on the host
    xid: int
    pci: str | None  # "0000:83:00" (the kernel log's) or None (NVML's, which names the GPU)
    gpu: int | None  # the GPU's index: NVML's, or the one whose PCI address matches
    text: str | None
    source: str | None  # "kmsg", "journalctl", "nvml"


@dataclass(frozen=True, slots=True)
class HostHealth:
    """One host's health reading, as of its last report."""

    source: str | None  # "nvml", "nvidia-smi"; None: no GPU reader
    read_at: float | None  # when the GPUs' health was last read (host clock)
    gpus: tuple[GpuHealth, ...] = ()
    xids: tuple[XidEvent, ...] = ()
    xid_source: str | None = None  # where Xids are read from ("kmsg", "nvml", ...)
    xid_error: str | None = None  # why the kernel log cannot be read
    error: str | None = None  # "nvidia-smi not answering": a host-level finding
    error_since: float | None = None
    # Reader threads that died on the host: (reader, "ErrorType: message"). What they
    # would have found is unknown, so the host warns instead of reading "ok".
    readers: tuple[tuple[str, str], ...] = ()

    def gpu(self, index: int) -> GpuHealth | None:
        return next((g for g in self.gpus if g.index == index), None)


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        text = values.text(value)
        if text is not None and text.lower().startswith("0x"):
            try:
                return int(text, 16)
            except ValueError:
                return None
        return values.integer(text)
    return None


def _str(value: Any) -> str | None:
    return values.text(value) if isinstance(value, str) else None


def _fan(value: Any) -> str | None:
    text = value.strip().strip("[]") if isinstance(value, str) else None
    return "ERR!" if text and text.upper() == "ERR!" else None


def _gpu(raw: Mapping[str, Any]) -> GpuHealth | None:
    kinds = {attr: kind for attr, kind, _query in HEALTH_FIELDS}
    out: dict[str, Any] = {}
    for attr, kind in kinds.items():
        value = raw.get(attr)
        out[attr] = _fan(value) if attr == "fan" else _int(value) if kind == "int" else _str(value)
    if out["index"] is None:
        return None
    return GpuHealth(**out)


def _nvsmi_gpus(raw: Mapping[str, Any]) -> list[GpuHealth]:
    fields = [str(f) for f in raw.get("fields") or ()]
    out = []
    for row in raw.get("rows") or ():
        cells = [c.strip() for c in str(row).split(",")]
        record = {_BY_QUERY[f][0]: c for f, c in zip(fields, cells, strict=False) if f in _BY_QUERY}
        gpu = _gpu(record)
        if gpu is not None:
            out.append(gpu)
    return out


def _xid(raw: Any, gpus: Sequence[GpuHealth]) -> XidEvent | None:
    if not isinstance(raw, Mapping):
        return None
    when, xid = raw.get("t"), _int(raw.get("xid"))
    if not isinstance(when, int | float) or xid is None:
        return None
    pci, gpu = _str(raw.get("pci")), _int(raw.get("gpu"))
    if gpu is None and pci is not None:
        key = pci_key(pci)
        gpu = next((g.index for g in gpus if key and pci_key(g.pci_bus_id) == key), None)
    return XidEvent(float(when), xid, pci, gpu, _str(raw.get("text")), _str(raw.get("source")))


def decode_health(raw: Any) -> HostHealth | None:
    """A line's ``health`` record -> HostHealth (None: the line carried none)."""
    if not isinstance(raw, Mapping):
        return None
    if isinstance(raw.get("nvsmi"), Mapping):
        gpus = _nvsmi_gpus(raw["nvsmi"])
    else:
        found = (_gpu(g) for g in raw.get("gpus") or () if isinstance(g, Mapping))
        gpus = [g for g in found if g is not None]
    xids = (_xid(x, gpus) for x in raw.get("xids") or ())
    since = raw.get("error_since")
    read_at = raw.get("t")
    return HostHealth(
        source=_str(raw.get("source")),
        read_at=float(read_at) if isinstance(read_at, int | float) else None,
        gpus=tuple(gpus),
        xids=tuple(x for x in xids if x is not None),
        xid_source=_str(raw.get("xid_source")),
        xid_error=_str(raw.get("xid_error")),
        error=_str(raw.get("error")),
        error_since=float(since) if isinstance(since, int | float) else None,
        readers=_readers(raw.get("readers")),
    )


def _readers(raw: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, Mapping):
        return ()
    return tuple(sorted((str(name), str(error)) for name, error in raw.items()))


def xid_to_json(x: XidEvent) -> dict[str, Any]:
    return dict(
        zip(names(XID_FIELDS), (x.time, x.xid, x.pci, x.gpu, x.text, x.source), strict=True)
    )
