"""Run the sampler's health reading ONCE on a machine with a real NVIDIA GPU and print what
it read, as JSON: NVML's reading (``nvml_health``), the nvidia-smi fallback's reading of
the same GPUs (``NvsmiHealth``), the fields where the two differ, the Xid sources (NVML
event set registration, the kernel log), what the console's verdict makes of each, and
how long each reading took. Nothing is changed on the machine.

    python3 bench/nvml_health_probe.py            # from the repository root

Needs python3 and nvidia-ml-py (pynvml) for the NVML half, nvidia-smi for the other;
either missing is reported in the JSON, not raised. The console's verdict is added where
the console's own imports load (its venv); the readings need the standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from console.hostprogs.sampler import health
from console.hostprogs.sampler.schema import HEALTH_FIELDS, names


def _nvml() -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        import pynvml
    except ImportError as exc:
        return {"error": f"pynvml not importable: {exc}"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return {"error": f"nvmlInit failed: {type(exc).__name__}: {exc}"}
    out["driver"] = _text(pynvml.nvmlSystemGetDriverVersion())
    count = pynvml.nvmlDeviceGetCount()
    out["gpus"] = [
        _text(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)
    ]
    started = time.perf_counter()
    out["records"] = health.nvml_health(pynvml, count)
    out["first_read_ms"] = round((time.perf_counter() - started) * 1000, 3)
    times = []
    for _ in range(20):
        started = time.perf_counter()
        health.nvml_health(pynvml, count)
        times.append((time.perf_counter() - started) * 1000)
    out["read_ms_median_of_20"] = round(sorted(times)[len(times) // 2], 3)
    try:
        xids = health.NvmlXids(pynvml, count)
        out["xid_event_set"] = "registered"
        out["xid_events_now"] = xids.poll()
    except Exception as exc:
        out["xid_event_set"] = f"not available: {type(exc).__name__}: {exc}"
    return out


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvsmi() -> dict[str, Any]:
    if not shutil.which("nvidia-smi"):
        return {"error": "nvidia-smi not found"}
    reader = health.NvsmiHealth(every=3600.0)
    started = time.perf_counter()
    reader.first.wait(health.ANSWER_WITHIN_S + 5)
    took = (time.perf_counter() - started) * 1000
    reading, error, _since = reader.latest()
    reader.stop()
    out: dict[str, Any] = {"error": error, "query_ms": round(took, 1), "fields": reader.fields}
    if reading is not None:
        out["rows"] = reading[2]
    return out


def _decoded(raw: dict[str, Any]) -> Any:
    try:
        from console.probe.health_models import decode_health
    except Exception as exc:  # the console's dependencies are not installed here
        return None, f"console not importable here: {exc}"
    return decode_health(raw), None


def _verdicts(decoded: Any) -> Any:
    try:
        from console.probe.health import host_verdicts
        from console.probe.models import GpuSample, HostSample, HostView
        from console.transport.base import HostState
    except Exception as exc:
        return f"console not importable here: {exc}"
    gpus = tuple(GpuSample(g.index) for g in decoded.gpus)
    sample = HostSample("this-host", time.time(), decoded.source or "none", gpus, health=decoded)
    view = HostView("this-host", HostState.UP, "", sample)
    return [v.to_json() for v in host_verdicts(view)]


def main() -> int:
    report: dict[str, Any] = {"host": os.uname().nodename}
    nvml = _nvml()
    nvsmi = _nvsmi()
    kernel = health.KernelXids()
    report["kernel_log"] = {
        "source": kernel.source,
        "error": kernel.error,
        "xids": kernel.poll(),
    }
    report["nvml"] = nvml
    report["nvidia_smi"] = nvsmi
    raw_nvml = {"source": "nvml", "t": time.time(), "gpus": nvml.get("records") or []}
    raw_smi = {"source": "nvidia-smi", "t": time.time(), "nvsmi": nvsmi}
    a, a_err = _decoded(raw_nvml)
    b, b_err = _decoded(raw_smi)
    if a_err or b_err:
        report["compare"] = a_err or b_err
    else:
        diffs = []
        for ga in a.gpus:
            gb = b.gpu(ga.index)
            for name in names(HEALTH_FIELDS):
                va, vb = getattr(ga, name), getattr(gb, name) if gb else None
                if va != vb:
                    diffs.append({"gpu": ga.index, "field": name, "nvml": va, "nvidia_smi": vb})
        report["nvml_vs_nvidia_smi"] = diffs
        report["verdict_from_nvml"] = _verdicts(a)
        report["verdict_from_nvidia_smi"] = _verdicts(b)
    json.dump(report, sys.stdout, indent=1, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
