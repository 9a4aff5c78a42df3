"""What a host is: OS, kernel, CPUs, memory, Python, torch, GPUs, free disk in work_dir.

One command per host gathers everything: ``console/hostprogs/facts_program.py`` sent on
stdin to the host's ``python3 -`` (after the host's ``setup`` line, so the Python that
jobs will use is the one asked), with ``console/hostprogs/facts_shell.py`` as a plain
``sh`` fallback when that Python is missing. Both print two marked JSON lines, a
versioned hello and the facts; :func:`parse_facts` turns them into :class:`HostFacts`.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

from console.errors import TransportError
from console.hostprogs import facts_program
from console.hostprogs.facts_shell import FACTS_SHELL
from console.inventory import Host
from console.probe.nvsmi_csv import parse_query_gpu
from console.transport.base import HostConnection
from console.transport.hello import check_hello
from console.transport.ship import HostProgram, python_command, shell_word, with_setup

MARKER = facts_program.MARKER
GPU_QUERY = facts_program.GPU_QUERY


@cache
def program_source() -> str:
    return Path(facts_program.__file__).read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    name: str | None
    memory_total_mib: float | None


@dataclass(frozen=True, slots=True)
class HostFacts:
    hostname: str | None
    os: str | None  # /etc/os-release PRETTY_NAME
    kernel: str | None
    arch: str | None
    cpus: int | None
    memory_total_bytes: int | None
    python: str | None  # None: no python3 (facts came from the sh fallback)
    python_path: str | None
    torch: str | None  # None: torch is not installed for that Python
    nvidia_smi: str  # "ok", "missing" or "failed: <what it said>"
    gpus: tuple[GpuInfo, ...]
    work_dir: str | None  # expanded on the host
    disk_free_bytes: int | None
    via: str  # "python" or "sh"
    notes: tuple[str, ...] = ()

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def gpu_models(self) -> tuple[str, ...]:
        """Distinct GPU model names, in first-seen order."""
        return tuple(dict.fromkeys(g.name for g in self.gpus if g.name))

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpu_count"] = self.gpu_count
        data["gpu_models"] = list(self.gpu_models)
        return data


def facts_command(host: Host) -> tuple[str, str]:
    """(shell line, stdin) that print the facts lines on ``host``.

    ``setup`` runs first (:func:`console.transport.ship.with_setup`); everything else
    is quoted.
    """
    work_dir = shlex.quote(host.work_dir)
    program = HostProgram(facts_program.PROGRAM, program_source(), (host.work_dir,))
    python = shell_word(host.python)
    shell = (
        FACTS_SHELL.replace("QUERY", shlex.join(GPU_QUERY))
        .replace('"MARKER"', shlex.quote(MARKER))
        .replace('"VERSION"', str(facts_program.VERSION))
    )
    body = (
        f"if command -v {python} >/dev/null 2>&1; then {python_command(host.python, program)}; "
        f"else sh -c {shlex.quote(shell)} distconsole-facts {work_dir} </dev/null; fi"
    )
    return with_setup(host.setup, f"{{ {body}; }}"), program.source


# Kept under its old name: callers quote remote paths with it.
remote_word = shell_word


def parse_facts(stdout: str, host: str = "host") -> HostFacts:
    """The facts from a host's output: the marked hello, then the marked facts (setup
    may print before them)."""
    lines = [ln[len(MARKER) :] for ln in stdout.splitlines() if ln.startswith(MARKER)]
    if not lines:
        tail = stdout.strip()[-300:] or "(no output)"
        raise TransportError(f"host facts missing from the output: {tail}")
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise TransportError(f"host facts are not valid JSON: {exc}") from None
    check_hello(host, facts_program.PROGRAM, facts_program.VERSION, records[0])
    if len(records) < 2:
        raise TransportError(f"{host}: host facts missing after the facts program's hello")
    data = records[-1]
    if not isinstance(data, dict):
        raise TransportError("host facts are not a JSON object")
    return facts_from_json(data)


def facts_from_json(data: Mapping[str, Any]) -> HostFacts:
    smi = data.get("nvidia_smi") or {}
    status = str(smi.get("status") or "missing")
    output = str(smi.get("output") or "")
    gpus: tuple[GpuInfo, ...] = ()
    if status == "ok":
        gpus = parse_gpu_query(output)
    elif status == "failed":
        status = f"failed: {_first_line(output) or 'no output'}"
    return HostFacts(
        hostname=_str(data.get("hostname")),
        os=_str(data.get("os")),
        kernel=_str(data.get("kernel")),
        arch=_str(data.get("arch")),
        cpus=_int(data.get("cpus")),
        memory_total_bytes=_int(data.get("memory_total_bytes")),
        python=_str(data.get("python")),
        python_path=_str(data.get("python_path")),
        torch=_str(data.get("torch")),
        nvidia_smi=status,
        gpus=gpus,
        work_dir=_str(data.get("work_dir")),
        disk_free_bytes=_int(data.get("disk_free_bytes")),
        via=str(data.get("via") or "python"),
        notes=tuple(str(n) for n in data.get("notes") or ()),
    )


def parse_gpu_query(output: str) -> tuple[GpuInfo, ...]:
    """GPUs from ``nvidia-smi --query-gpu=...`` CSV with its header line."""
    return tuple(
        GpuInfo(index=g.index, name=g.name, memory_total_mib=g.memory_total_mib)
        for g in parse_query_gpu(output)
    )


async def gather_facts(conn: HostConnection, timeout: float) -> HostFacts:
    """Run the facts command on one connected host.

    Raises HostUnavailable / CommandTimeout from the transport, and TransportError when
    the command fails (for example the setup line) or prints no facts.
    """
    line, program = facts_command(conn.host)
    result = await conn.run(line, timeout=timeout, input=program)
    if not result.ok and MARKER not in result.stdout:
        detail = _last_line(result.stderr)
        what = "the setup line or the facts command" if conn.host.setup else "the facts command"
        raise TransportError(
            f"{what} failed with exit status {result.exit_status}"
            + (f": {detail}" if detail else "")
        )
    return parse_facts(result.stdout, conn.host.name)


def _last_line(text: str) -> str:
    stripped = text.strip()
    return stripped.splitlines()[-1][:200] if stripped else ""


def _first_line(text: str) -> str:
    stripped = text.strip()
    return stripped.splitlines()[0][:200] if stripped else ""


def _str(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None
