"""The sampler's NVML health reading: each GPU's ECC, row remapping, recovery action,
clock events, PCIe link, fan and NVLink state through NVML (``nvml_health``), and the
critical Xid events of NVML's event set (``NvmlXids``). The nvidia-smi reading and the
kernel log's Xids are ``health.py``'s (a job supervisor's drain ships that one alone).

Part of the sampler program (see ``program.py``): runs on the host, standard library
only plus optional pynvml. Records are built with the sample schema's :func:`record`.
"""

from __future__ import annotations

import contextlib
import time

if False:  # for type checkers only, without importing typing on the host
    from typing import Any

if __name__ != "__main__":  # imported by the console/tests; on a host the source precedes
    from console.hostprogs.sampler.schema import HEALTH_FIELDS, XID_FIELDS, record

# NVML's gpu recovery action values (nvmlDeviceGetFieldValues NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)
RECOVERY_ACTIONS = {
    0: None,
    1: "GPU Reset",
    2: "Node Reboot",
    3: "Drain P2P",
    4: "Drain and Reset",
    5: "Recover IMEX Domain",
    6: "Bus Reset",
    7: "System Reboot",
}
FIELD_GPU_RECOVERY_ACTION = 230
EVENT_XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError


def decode_nvml_event(event: Any, index_of: Any, now: float) -> dict[str, object] | None:
    """One ``nvmlEventSetWait`` answer as an XID_FIELDS record (None: not an Xid event).

    ``index_of(device)`` gives the GPU index of the event's device handle (None: unknown).
    """
    if not int(getattr(event, "eventType", 0)) & EVENT_XID_CRITICAL:
        return None
    try:
        gpu = index_of(getattr(event, "device", None))
    except Exception:  # an NVML error on a GPU that is going away
        gpu = None
    xid = int(getattr(event, "eventData", 0))
    return record(XID_FIELDS, {"t": now, "xid": xid, "gpu": gpu, "source": "nvml"})


def _yes_no(value: object) -> str | None:
    return None if value is None else ("Yes" if value else "No")


def nvml_health(nv: Any, count: int) -> list[dict[str, object]]:
    """Every GPU's HEALTH_FIELDS record read through NVML (``nv``: the pynvml module)."""
    out = []
    for i in range(count):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        out.append(record(HEALTH_FIELDS, _nvml_gpu(nv, h, i)))
    return out


def _nvml_gpu(nv: Any, h: Any, index: int) -> dict[str, object]:
    def ask(name: str, *args: object) -> Any:
        fn = getattr(nv, name, None)
        if fn is None:
            return None
        try:
            return fn(h, *args)
        except Exception:  # not supported by this board or driver: not reported
            return None

    unc, cor = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED
    vol, agg = nv.NVML_VOLATILE_ECC, nv.NVML_AGGREGATE_ECC
    pci = ask("nvmlDeviceGetPciInfo")
    bus = getattr(pci, "busId", None)
    remap = ask("nvmlDeviceGetRemappedRows")  # (correctable, uncorrectable, pending, failed)
    pending = ask("nvmlDeviceGetRetiredPagesPendingStatus")
    events = ask("nvmlDeviceGetCurrentClocksEventReasons")
    if events is None:
        events = ask("nvmlDeviceGetCurrentClocksThrottleReasons")  # drivers before R535
    action = None
    values = ask("nvmlDeviceGetFieldValues", [FIELD_GPU_RECOVERY_ACTION])
    if values:
        v = values[0]
        if getattr(v, "nvmlReturn", 1) == 0:
            action = RECOVERY_ACTIONS.get(int(v.value.uiVal), str(int(v.value.uiVal)))
        else:
            action = None
    fan = None
    try:
        nv.nvmlDeviceGetFanSpeed(h)
    except Exception as exc:  # no fan (passive boards) is "not supported"; others: a fault
        if getattr(exc, "value", None) != getattr(nv, "NVML_ERROR_NOT_SUPPORTED", 3):
            fan = "ERR!"
    active = inactive = 0
    for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 0))):
        state = ask("nvmlDeviceGetNvLinkState", link)
        if state is None:
            continue  # no such link on this board
        if state:
            active += 1
        else:
            inactive += 1
    return {
        "index": index,
        "pci_bus_id": bus.decode("utf-8", "replace") if isinstance(bus, bytes) else bus,
        "ecc_uncorrected_volatile": ask("nvmlDeviceGetTotalEccErrors", unc, vol),
        "ecc_uncorrected_aggregate": ask("nvmlDeviceGetTotalEccErrors", unc, agg),
        "ecc_corrected_volatile": ask("nvmlDeviceGetTotalEccErrors", cor, vol),
        "ecc_corrected_aggregate": ask("nvmlDeviceGetTotalEccErrors", cor, agg),
        "retired_pages_pending": _yes_no(pending),
        "remapped_rows_pending": _yes_no(remap[2]) if remap else None,
        "remapped_rows_failure": _yes_no(remap[3]) if remap else None,
        "recovery_action": action if values else None,
        "clock_events": events,
        "pcie_gen": ask("nvmlDeviceGetCurrPcieLinkGeneration"),
        "pcie_gen_max": ask("nvmlDeviceGetMaxPcieLinkGeneration"),
        "pcie_width": ask("nvmlDeviceGetCurrPcieLinkWidth"),
        "pcie_width_max": ask("nvmlDeviceGetMaxPcieLinkWidth"),
        "fan": fan,
        "nvlink_active": active if active or inactive else None,
        "nvlink_inactive": inactive if active or inactive else None,
    }


class NvmlXids:
    """Critical Xid events from NVML's event set, polled without waiting (timeout 0)."""

    def __init__(self, nv: Any, count: int) -> None:
        self.nv = nv
        self.events = nv.nvmlEventSetCreate()
        for i in range(count):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            # Not supported on this board: the kernel log still tells.
            with contextlib.suppress(Exception):
                nv.nvmlDeviceRegisterEvents(h, EVENT_XID_CRITICAL, self.events)

    def poll(self) -> list[dict[str, object]]:
        out = []
        for _ in range(64):  # a burst is read over a few ticks, never in a tight loop
            try:
                event = self.nv.nvmlEventSetWait(self.events, 0)
            except Exception:  # NVML_ERROR_TIMEOUT: nothing waiting
                break
            found = decode_nvml_event(event, self.nv.nvmlDeviceGetIndex, time.time())
            if found is not None:
                out.append(found)
        return out
