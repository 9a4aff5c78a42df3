"""The health verdict's ``fail`` rules, ONE copy for the console and the hosts.

The console's verdict (``console/probe/health.py``) and the job supervisor's drain
(``console/hostprogs/supervisor/drain.py``, which ships this file in its single source)
both judge with these: a GPU fails on uncorrectable ECC errors since the last reset, a row
remap pending or failed, retired pages pending, a recovery action other than none, a
critical Xid on it in the last ``XID_FAIL_WINDOW_S``; a host fails when its nvidia-smi /
NVML does not answer within its bound. Also here because both sides read nvidia-smi's
values and the kernel log's PCI addresses the same way: the "not reported" placeholders
(``cell_text``) and the PCI address key (``pci_key``) an Xid is matched to a GPU with.

Standard library only, Python 3.7+, no I/O.
"""

from __future__ import annotations

if False:  # for type checkers only, without importing typing on the host
    from typing import Any

# nvidia-smi's placeholders where a board or driver has no figure: all "not reported".
NOT_REPORTED = {
    "",
    "n/a",
    "[n/a]",
    "na",
    "err!",
    "[err!]",
    "[not supported]",
    "not supported",
    "[unknown error]",
    "unknown error",
    "[gpu is lost]",
    "gpu is lost",
    "[function not found]",
    "function not found",
    "[insufficient permissions]",
    "insufficient permissions",
    "[requested functionality has been deprecated]",
    "requested functionality has been deprecated",
    "none",
}

XID_FAIL_WINDOW_S = 3600.0  # a critical Xid fails its GPU this long; after that it warns
NOT_ANSWERING = "not answering"  # in a reader's error: the GPU reader gave nothing in time

# The common Xids, in words (NVIDIA's Xid catalogue).
XID_NAMES = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping event",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}
# Xids that mean the GPU (not the application) is in trouble.
CRITICAL_XIDS = frozenset({48, 61, 62, 64, 74, 79, 95, 119, 120, 140})


def cell_text(value: str | None) -> str | None:
    """An nvidia-smi value stripped, or None when it says "not reported"."""
    if value is None:
        return None
    v = value.strip()
    if v.lower() in NOT_REPORTED:
        return None
    # Any other bracketed message ("[Unknown Error]" variants) is a placeholder too.
    if v.startswith("[") and v.endswith("]"):
        return None
    return v


def pci_key(address: str | None) -> tuple[int, int, int] | None:
    """(domain, bus, device) of "00000000:83:00.0" or "0000:83:00"; None when odd."""
    if not address:
        return None
    parts = address.strip().lower().split(":")
    if len(parts) != 3:
        return None
    try:
        return int(parts[0], 16), int(parts[1], 16), int(parts[2].split(".")[0], 16)
    except ValueError:
        return None


def xid_words(xid: int) -> str:
    """``Xid 79 (GPU has fallen off the bus)``; ``Xid 999`` for one without a name."""
    name = XID_NAMES.get(xid)
    return f"Xid {xid} ({name})" if name else f"Xid {xid}"


def xid_fails(xid: int, when: float, now: float) -> bool:
    """A critical Xid seen less than XID_FAIL_WINDOW_S ago fails the GPU it names."""
    return xid in CRITICAL_XIDS and now - when < XID_FAIL_WINDOW_S


def reader_hung(error: str | None) -> bool:
    """A reader error that fails the host: the GPU reader did not answer in its bound
    (another error, "No devices were found", a driver not loaded, only warns)."""
    return bool(error) and NOT_ANSWERING in str(error)


def gpu_fail_reasons(get: Any) -> list[tuple[str, str]]:
    """(key, reason in words) for each ``fail`` finding of one GPU's health fields;
    ``get(attribute)`` gives the HEALTH_FIELDS attribute's value (an int, "Yes"/"No",
    the recovery action in words; None where not reported)."""
    out = []
    ecc = get("ecc_uncorrected_volatile")
    if ecc:
        out.append(("ecc", f"{ecc} uncorrectable ECC error(s) since the last reset"))
    if get("remapped_rows_failure") == "Yes":
        out.append(("remap-failed", "row remapping failed"))
    if get("remapped_rows_pending") == "Yes":
        out.append(("remap", "row remap pending (reset the GPU)"))
    if get("retired_pages_pending") == "Yes":
        out.append(("retire", "retired pages pending (reset the GPU)"))
    action = get("recovery_action")
    if action:
        out.append(("recovery", f"recovery action: {action}"))
    return out
