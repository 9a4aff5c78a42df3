"""What the pre-flight probe (``console/hostprogs/preflight_probe.py``) says about a host,
as a typed record; field names are the probe's JSON keys, so ``to_json`` keeps its shape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from console.errors import TransportError
from console.hostprogs import preflight_probe
from console.transport.hello import check_hello


@dataclass(frozen=True, slots=True)
class GpuUse:
    """A process already on a GPU (``nvidia-smi --query-compute-apps``)."""

    gpu: str
    pid: int
    name: str
    used_mib: str  # as nvidia-smi wrote it


@dataclass(frozen=True, slots=True)
class SshCheck:
    """``ssh -o BatchMode=yes -o StrictHostKeyChecking=yes PEER true`` from the host."""

    ok: bool
    status: int | None  # None: it did not run or did not answer
    error: str  # ssh's last stderr line


@dataclass(frozen=True, slots=True)
class InterfaceState:
    up: bool | None  # None: not known (no /sys/class/net)
    addresses: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HostProbe:
    python: str | None
    executable: str | None
    packages: Mapping[str, str | None]  # name -> version, None: not installed
    programs: Mapping[str, str | None]  # name -> path, None: not found
    interfaces: tuple[str, ...]
    hostname: str | None
    cwd_ok: Mapping[str, bool]
    files_ok: tuple[bool, ...]  # one per (cwd, path) asked about, in order
    uid: int | None  # the effective user id jobs run as (0: root)
    ports: Mapping[int, str]  # port asked about -> "" when free, else why it is not
    gpus: int | None  # None: nvidia-smi missing or failed to run
    gpu_processes: tuple[GpuUse, ...]
    gpu_error: str
    ssh: Mapping[str, SshCheck] = field(default_factory=dict)  # peer -> result
    interface_state: InterfaceState | None = None  # of the interface asked about

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def host_probe(raw: Mapping[str, Any]) -> HostProbe:
    gpus = raw.get("gpus")
    return HostProbe(
        python=_str(raw.get("python")),
        executable=_str(raw.get("executable")),
        packages={str(k): _str(v) for k, v in (raw.get("packages") or {}).items()},
        programs={str(k): _str(v) for k, v in (raw.get("programs") or {}).items()},
        interfaces=tuple(str(i) for i in raw.get("interfaces") or ()),
        hostname=_str(raw.get("hostname")),
        cwd_ok={str(k): bool(v) for k, v in (raw.get("cwd_ok") or {}).items()},
        files_ok=tuple(bool(v) for v in raw.get("files_ok") or ()),
        uid=raw.get("uid") if isinstance(raw.get("uid"), int) else None,
        ports={int(k): str(v or "") for k, v in (raw.get("ports") or {}).items()},
        gpus=gpus if isinstance(gpus, int) and not isinstance(gpus, bool) else None,
        gpu_processes=tuple(
            GpuUse(str(p["gpu"]), int(p["pid"]), str(p["name"]), str(p["used_mib"]))
            for p in raw.get("gpu_processes") or ()
        ),
        gpu_error=str(raw.get("gpu_error") or ""),
        ssh={
            str(peer): SshCheck(
                bool(r.get("ok")),
                r["status"] if isinstance(r.get("status"), int) else None,
                str(r.get("error") or ""),
            )
            for peer, r in (raw.get("ssh") or {}).items()
        },
        interface_state=_interface(raw.get("interface_state")),
    )


def _interface(raw: Any) -> InterfaceState | None:
    if not isinstance(raw, dict):
        return None
    up = raw.get("up")
    return InterfaceState(
        up if isinstance(up, bool) else None, tuple(str(a) for a in raw.get("addresses") or ())
    )


def parse_probe(host: str, stdout: str) -> HostProbe | None:
    """The probe's report from its stdout (the hello, then one JSON line); None when it
    printed no JSON at all (it did not run). Setup lines may print before it."""
    records = [json.loads(ln) for ln in stdout.splitlines() if ln.startswith("{")]
    if not records:
        return None
    check_hello(host, preflight_probe.PROGRAM, preflight_probe.VERSION, records[0])
    if len(records) < 2 or not isinstance(records[-1], dict):
        raise TransportError(f"{host}: the pre-flight probe printed its hello but no report")
    return host_probe(records[-1])
