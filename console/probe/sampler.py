"""Console side of the sampler: the command and program sent to a host, and decoding
the JSON lines it writes back into :class:`HostSample`.

The program is ``console/hostprogs/sampler/program.py`` with the files it needs sent
ahead of it; its lines are decoded with the same field tables it writes them from
(``console/hostprogs/sampler/schema.py``).
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from console.hostprogs.sampler import program as sampler_program
from console.hostprogs.sampler import schema as sample_schema
from console.hostprogs.sampler.schema import (
    GPU_FIELDS,
    GPU_PROCESSES,
    HOST_FIELDS,
    PROCESS_FIELDS,
    PROCESS_OWNER_FIELDS,
)
from console.hostprogs.sampler.simulated import model_for_tags
from console.inventory import Host
from console.probe import nvsmi_csv
from console.probe.health_models import HostHealth, decode_health
from console.probe.models import GpuProcess, GpuSample, HostSample
from console.transport.hello import check_hello
from console.transport.ship import HostProgram, shipment, with_setup

_HOSTPROGS = Path(sample_schema.__file__).resolve().parent
# In this order: each file's names are defined before the next one uses them.
PROGRAM_FILES = (
    "schema.py",
    "simulated.py",
    "procs.py",
    "gpus.py",
    "health.py",
    "nvml.py",
    "host.py",
    "program.py",
)
_FUTURE = "from __future__ import annotations"


@cache
def program_source() -> str:
    """The sampler's files as one script for ``python3 -``."""
    parts = [(_HOSTPROGS / name).read_text() for name in PROGRAM_FILES]
    body = "\n".join(ln for part in parts for ln in part.splitlines() if ln.strip() != _FUTURE)
    return f"{_FUTURE}\n{body}\n"


def sampler_host_program(host: Host, interval: float, *, health: bool = True) -> HostProgram:
    mode = "simulated" if host.gpu_source == "simulated" else "auto"
    gpus = host.gpus if isinstance(host.gpus, int) else 0
    # The fifth: the simulated board's name (an h100-tagged demo host shows an H100).
    args: tuple[str, ...] = (f"{interval:g}", mode, str(gpus), host.name, model_for_tags(host.tags))
    # The sixth: no health readers where nothing reads health (`gpus`): each one is a
    # process on the host (nvidia-smi's health query, journalctl).
    args += () if health else (sampler_program.NO_HEALTH,)
    return HostProgram(sampler_program.PROGRAM, program_source(), args)


def sampler_command(host: Host, interval: float, *, health: bool = True) -> str:
    """The shell command that starts the sampler; its program follows on stdin.

    exec: the sampler's parent is then the ssh session itself, so it notices it ending.
    """
    return shipment(host, sampler_host_program(host, interval, health=health), exec_=True).command


def nvsmi_loop_command(host: Host, interval: float) -> str:
    """Fallback for hosts without python3: nvidia-smi's own loop, parsed here (interval
    0: one query, no loop)."""
    argv = [
        "nvidia-smi",
        "--query-gpu=" + ",".join(nvsmi_csv.QUERY_GPU_FIELDS),
        "--format=csv,noheader,nounits",
    ]
    if interval > 0:
        argv += ["-lms", str(max(100, int(interval * 1000)))]
    return with_setup(host.setup, "exec " + shlex.join(argv))


def _value(kind: str, value: Any) -> int | float | str | None:
    if kind == "str":
        return str(value) if value is not None and value != "" else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if kind == "int" else float(value)


def _as_str(value: Any) -> str | None:
    return str(value) if value is not None and value != "" else None


# JSON gives exactly int, float, bool, str, None, list or dict: an exact type test keeps
# bools (a subclass of int) out, as _value does.
def _as_int(value: Any) -> int | None:
    kind = type(value)
    return value if kind is int else int(value) if kind is float else None


def _as_float(value: Any) -> float | None:
    kind = type(value)
    return value if kind is float else float(value) if kind is int else None


_CONVERT = {"str": _as_str, "int": _as_int, "float": _as_float}


@cache
def _converters(table: tuple[tuple[str, ...], ...]) -> tuple[tuple[str, Any], ...]:
    return tuple((field[0], _CONVERT[field[1]]) for field in table)


def _fields(table: tuple[tuple[str, ...], ...], raw: Any) -> dict[str, Any]:
    """A record's values by the schema's names and types (None: not reported). Decoded
    for every GPU of every host every interval: the converters are looked up once."""
    values: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    get = values.get
    return {name: convert(get(name)) for name, convert in _converters(table)}


def _owned(process: GpuProcess, owner: Any) -> GpuProcess:
    """``process`` with what the host's /proc says about who runs it."""
    o = _fields(PROCESS_OWNER_FIELDS, owner)
    return GpuProcess(
        pid=process.pid,
        command=o["command"] or process.command,
        user=o["user"],
        used_memory_mib=process.used_memory_mib,
        type=process.type,
        job=process.job or o["job"],
        rank=process.rank if process.rank is not None else o["rank"],
        local_rank=process.local_rank if process.local_rank is not None else o["local_rank"],
    )


def _process(raw: Any, owners: Mapping[str, Any]) -> GpuProcess:
    p = _fields(PROCESS_FIELDS, raw)
    if p["pid"] is None:
        raise ValueError(f"a GPU process without a pid: {raw!r:.200}")
    return _owned(GpuProcess(**p), owners.get(str(p["pid"])))


def _gpu(raw: Any, owners: Mapping[str, Any]) -> GpuSample:
    g = _fields(GPU_FIELDS, raw)
    if g["index"] is None:
        raise ValueError(f"a GPU without an index: {raw!r:.200}")
    procs = raw.get(GPU_PROCESSES) or ()
    return GpuSample(**g, processes=tuple(_process(p, owners) for p in procs))


def _nvsmi_gpus(raw: Mapping[str, Any], owners: Mapping[str, Any]) -> tuple[GpuSample, ...]:
    gpus = nvsmi_csv.parse_query_gpu(raw.get("rows") or (), raw.get("fields") or ())
    apps = nvsmi_csv.parse_compute_apps(raw.get("apps_rows") or (), raw.get("apps_fields") or ())
    enriched = [
        nvsmi_csv.AppRow(
            a.gpu_uuid, a.gpu_bus_id, _owned(a.process, owners.get(str(a.process.pid)))
        )
        for a in apps
    ]
    return nvsmi_csv.attach_processes(gpus, enriched)


def _json(name: str, line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name}: sampler wrote a line that is not JSON: {line[:200]!r}") from exc


def decode_line(name: str, line: str, now: float | None = None) -> HostSample:
    """One sampler sample line -> HostSample. Raises ValueError on a line that is not one."""
    return decode_record(name, _json(name, line), line, now)


def decode_record(
    name: str,
    raw: Any,
    line: str = "",
    now: float | None = None,
    health: HostHealth | None = None,
) -> HostSample:
    """``health``: the run's last health reading, kept when this line carries none (a
    sampler sends it only when it changed)."""
    if not isinstance(raw, dict) or "gpu_source" not in raw or "host" not in raw:
        raise ValueError(f"{name}: unexpected sampler line: {line[:200] or raw!r}")
    owners = raw.get("procs") or {}
    if raw.get("nvsmi"):
        gpus = _nvsmi_gpus(raw["nvsmi"], owners)
    else:
        gpus = tuple(_gpu(g, owners) for g in raw.get("gpus") or ())
    source = str(raw.get("gpu_source") or "none")
    return HostSample(
        name=name,
        time=time.time() if now is None else now,
        gpu_source=source,
        gpus=gpus,
        gpu_error=_value("str", raw.get("gpu_error")),  # type: ignore[arg-type]
        simulated=source == "simulated",
        health=decode_health(raw.get("health")) or health,
        **_fields(HOST_FIELDS, raw.get("host")),
    )


class SampleReader:
    """One sampler run's lines: its versioned hello first, then one sample per line.

    ``read`` returns None for the hello, raises ValueError for a line that is not JSON
    (a setup line that printed something) and :class:`HostProgramError` when the first
    JSON line is not this console's sampler hello (version mismatch).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.greeted = False
        self.health: HostHealth | None = None

    def read(self, line: str, now: float | None = None) -> HostSample | None:
        raw = _json(self.name, line)
        if not self.greeted:
            check_hello(self.name, sampler_program.PROGRAM, sampler_program.VERSION, raw)
            self.greeted = True
            return None
        sample = decode_record(self.name, raw, line, now, self.health)
        self.health = sample.health
        return sample


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
