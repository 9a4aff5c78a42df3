"""Console side of the sampler: the command and program sent to a host, and decoding
the JSON lines it writes back into :class:`HostSample`.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from console.inventory import Host
from console.probe import nvsmi_csv
from console.probe.models import GpuProcess, GpuSample, HostSample

_HERE = Path(__file__).resolve().parent
_FUTURE = "from __future__ import annotations"


@cache
def program_source() -> str:
    """simulated.py then sampler_program.py, as one script for ``python3 -``."""
    parts = [(_HERE / "simulated.py").read_text(), (_HERE / "sampler_program.py").read_text()]
    body = "\n".join(ln for part in parts for ln in part.splitlines() if ln.strip() != _FUTURE)
    return f"{_FUTURE}\n{body}\n"


def _with_setup(host: Host, argv: Sequence[str]) -> str:
    # exec: the sampler's parent is then the ssh session itself, so it notices it ending.
    command = "exec " + shlex.join(argv)
    return f"{host.setup} && {command}" if host.setup else command


def sampler_command(host: Host, interval: float) -> str:
    """The shell command that starts the sampler; its program follows on stdin."""
    mode = "simulated" if host.gpu_source == "simulated" else "auto"
    gpus = host.gpus if isinstance(host.gpus, int) else 0
    argv = [host.python, "-u", "-", f"{interval:g}", mode, str(gpus), host.name]
    return _with_setup(host, argv)


def nvsmi_loop_command(host: Host, interval: float) -> str:
    """Fallback for hosts without python3: nvidia-smi's own loop, parsed here."""
    argv = [
        "nvidia-smi",
        "--query-gpu=" + ",".join(nvsmi_csv.QUERY_GPU_FIELDS),
        "--format=csv,noheader,nounits",
        "-lms",
        str(max(100, int(interval * 1000))),
    ]
    return _with_setup(host, argv)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return str(value) if value is not None and value != "" else None


def _process(raw: Mapping[str, Any], info: Mapping[str, Any] | None) -> GpuProcess:
    info = info or {}
    return GpuProcess(
        pid=int(raw["pid"]),
        command=_str(info.get("command")) or _str(raw.get("command")),
        user=_str(info.get("user")),
        used_memory_mib=_num(raw.get("used_memory_mib")),
        type=_str(raw.get("type")),
        job=_str(raw.get("job") or info.get("job")),
        rank=_int(raw["rank"] if raw.get("rank") is not None else info.get("rank")),
        local_rank=_int(
            raw["local_rank"] if raw.get("local_rank") is not None else info.get("local_rank")
        ),
    )


def _gpu(raw: Mapping[str, Any], procs: Mapping[str, Any]) -> GpuSample:
    return GpuSample(
        index=int(raw["index"]),
        uuid=_str(raw.get("uuid")),
        name=_str(raw.get("name")),
        utilization_gpu=_num(raw.get("utilization_gpu")),
        utilization_memory=_num(raw.get("utilization_memory")),
        memory_used_mib=_num(raw.get("memory_used_mib")),
        memory_total_mib=_num(raw.get("memory_total_mib")),
        temperature_c=_num(raw.get("temperature_c")),
        power_draw_w=_num(raw.get("power_draw_w")),
        power_limit_w=_num(raw.get("power_limit_w")),
        fan_percent=_num(raw.get("fan_percent")),
        pstate=_str(raw.get("pstate")),
        clock_sm_mhz=_num(raw.get("clock_sm_mhz")),
        clock_mem_mhz=_num(raw.get("clock_mem_mhz")),
        ecc_corrected=_int(raw.get("ecc_corrected")),
        ecc_uncorrected=_int(raw.get("ecc_uncorrected")),
        mig_mode=_str(raw.get("mig_mode")),
        processes=tuple(
            _process(p, procs.get(str(p.get("pid")))) for p in raw.get("processes", ())
        ),
    )


def _nvsmi_gpus(raw: Mapping[str, Any], procs: Mapping[str, Any]) -> tuple[GpuSample, ...]:
    gpus = nvsmi_csv.parse_query_gpu(raw.get("rows", ()), raw.get("fields", ()))
    apps = nvsmi_csv.parse_compute_apps(raw.get("apps_rows", ()), raw.get("apps_fields", ()))
    enriched = [
        nvsmi_csv.AppRow(
            a.gpu_uuid,
            a.gpu_bus_id,
            _process(
                {
                    "pid": a.process.pid,
                    "used_memory_mib": a.process.used_memory_mib,
                    "command": a.process.command,
                },
                procs.get(str(a.process.pid)),
            ),
        )
        for a in apps
    ]
    return nvsmi_csv.attach_processes(gpus, enriched)


def decode_line(name: str, line: str, now: float | None = None) -> HostSample:
    """One sampler JSON line -> HostSample. Raises ValueError on a line that is not one."""
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name}: sampler wrote a line that is not JSON: {line[:200]!r}") from exc
    if not isinstance(raw, dict) or raw.get("v") != 1:
        raise ValueError(f"{name}: unexpected sampler line: {line[:200]!r}")
    procs = raw.get("procs") or {}
    if "nvsmi" in raw:
        gpus = _nvsmi_gpus(raw["nvsmi"], procs)
    else:
        gpus = tuple(_gpu(g, procs) for g in raw.get("gpus", ()))
    host = raw.get("host") or {}
    source = str(raw.get("gpu_source", "none"))
    return HostSample(
        name=name,
        time=time.time() if now is None else now,
        gpu_source=source,
        gpus=gpus,
        gpu_error=_str(raw.get("gpu_error")),
        simulated=source == "simulated",
        cpu_percent=_num(host.get("cpu_percent")),
        cpu_count=_int(host.get("cpu_count")),
        load_1m=_num(host.get("load_1m")),
        load_5m=_num(host.get("load_5m")),
        load_15m=_num(host.get("load_15m")),
        memory_used_mib=_num(host.get("memory_used_mib")),
        memory_total_mib=_num(host.get("memory_total_mib")),
        net_rx_bytes_s=_num(host.get("net_rx_bytes_s")),
        net_tx_bytes_s=_num(host.get("net_tx_bytes_s")),
        disk_read_bytes_s=_num(host.get("disk_read_bytes_s")),
        disk_write_bytes_s=_num(host.get("disk_write_bytes_s")),
        host_source=_str(host.get("host_source")),
    )


def decode_nvsmi_loop(name: str, rows: Sequence[str], now: float | None = None) -> HostSample:
    """One tick of the no-python fallback (``nvidia-smi -lms`` rows) -> HostSample."""
    gpus = nvsmi_csv.parse_query_gpu(rows, nvsmi_csv.QUERY_GPU_FIELDS)
    return HostSample(
        name=name,
        time=time.time() if now is None else now,
        gpu_source="nvidia-smi-loop",
        gpus=gpus,
        gpu_error=None if gpus else "nvidia-smi: " + " ".join(rows)[:200],
    )
