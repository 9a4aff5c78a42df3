"""What a host is: OS, kernel, CPUs, memory, Python, torch, GPUs, free disk in work_dir.

One command per host gathers everything: a small Python program sent on stdin to the
host's ``python3 -`` (after the host's ``setup`` line, so the Python that jobs will use
is the one asked), with a plain ``sh`` fallback when that Python is missing. Both print
one marked JSON line; :func:`parse_facts` turns it into :class:`HostFacts`.

torch is looked up with ``importlib.util.find_spec`` and its version read from the
package metadata: importing torch would take seconds per host.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from console.errors import TransportError
from console.inventory import Host
from console.probe.nvsmi_csv import parse_query_gpu
from console.transport.base import HostConnection

MARKER = "DISTCONSOLE_FACTS "
GPU_QUERY = ("nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv")
NVIDIA_SMI_TIMEOUT_S = 10

# Runs on the host under any Python 3.6+: no f-strings with `=`, no walrus, no match.
FACTS_PROGRAM = r"""
import json, os, platform, shutil, subprocess, sys
facts = {"via": "python", "notes": []}
u = os.uname()
facts["hostname"], facts["kernel"], facts["arch"] = u.nodename, u.release, u.machine
facts["os"] = None
try:
    with open("/etc/os-release") as f:
        for line in f:
            if line.startswith("PRETTY_NAME="):
                facts["os"] = line.split("=", 1)[1].strip().strip("\"'")
except OSError:
    facts["os"] = u.sysname
try:
    facts["cpus"] = len(os.sched_getaffinity(0))
except (AttributeError, OSError):
    facts["cpus"] = os.cpu_count()
facts["memory_total_bytes"] = None
try:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                facts["memory_total_bytes"] = int(line.split()[1]) * 1024
except (OSError, ValueError, IndexError):
    pass
facts["python"] = platform.python_version()
facts["python_path"] = sys.executable
facts["torch"] = None
try:
    import importlib.util
    found = importlib.util.find_spec("torch") is not None
except (ImportError, ValueError):
    found = False
if found:
    try:
        from importlib.metadata import version
        facts["torch"] = version("torch")
    except Exception:
        facts["torch"] = "unknown"
smi = shutil.which("nvidia-smi")
facts["nvidia_smi"] = {"status": "missing", "output": ""}
if smi:
    try:
        done = subprocess.run([smi] + QUERY[1:], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, universal_newlines=True,
                              timeout=SMI_TIMEOUT)
        facts["nvidia_smi"] = {"status": "ok" if done.returncode == 0 else "failed",
                               "output": done.stdout[-20000:]}
    except subprocess.TimeoutExpired:
        facts["nvidia_smi"] = {"status": "failed", "output": "timed out"}
    except OSError as e:
        facts["nvidia_smi"] = {"status": "failed", "output": str(e)}
wd = os.path.expanduser(sys.argv[1])
facts["work_dir"] = wd
facts["disk_free_bytes"] = None
try:
    os.makedirs(wd, exist_ok=True)
    facts["disk_free_bytes"] = shutil.disk_usage(wd).free
except OSError as e:
    facts["notes"].append("work_dir %s: %s" % (wd, e.strerror or e))
sys.stdout.write(MARKER + json.dumps(facts) + "\n")
"""

# The same facts from POSIX sh + coreutils, for hosts without that Python.
FACTS_SHELL = r"""
wd=$1
case $wd in "~") wd=$HOME ;; "~/"*) wd=$HOME/${wd#"~/"} ;; esac
js() {
  printf '%s' "$1" | awk 'BEGIN {ORS = ""}
    {gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); gsub(/\t|\r/, " ")
     if (NR > 1) print "\\n"; print}'
}
num() { case $1 in ''|*[!0-9]*) printf null ;; *) printf '%s' "$1" ;; esac; }
os=$( (. /etc/os-release && printf '%s' "$PRETTY_NAME") 2>/dev/null || uname -s)
cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc 2>/dev/null)
mem=$(awk '/^MemTotal:/ {printf "%.0f", $2 * 1024}' /proc/meminfo 2>/dev/null)
notes=""
if mkdir -p "$wd" 2>/dev/null; then
  free=$(df -Pk "$wd" 2>/dev/null | awk 'NR == 2 {printf "%.0f", $4 * 1024}')
else
  free=""; notes="\"work_dir $(js "$wd"): cannot create it\""
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  if out=$(QUERY 2>&1); then st=ok; else st=failed; fi
else
  st=missing; out=""
fi
printf '%s{"via": "sh", "hostname": "%s", "kernel": "%s", "arch": "%s", "os": "%s", ' \
  "MARKER" "$(js "$(uname -n)")" "$(js "$(uname -r)")" "$(js "$(uname -m)")" "$(js "$os")"
printf '"cpus": %s, "memory_total_bytes": %s, "python": null, "python_path": null, ' \
  "$(num "$cpus")" "$(num "$mem")"
printf '"torch": null, "nvidia_smi": {"status": "%s", "output": "%s"}, ' "$st" "$(js "$out")"
printf '"work_dir": "%s", "disk_free_bytes": %s, "notes": [%s]}\n' \
  "$(js "$wd")" "$(num "$free")" "$notes"
"""


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
    """(shell line, stdin) that print the facts line on ``host``.

    ``setup`` is the user's own shell line and runs as written; everything else is
    quoted. The brace group with a newline keeps a trailing comment or ``;`` in setup
    from swallowing the rest.
    """
    python = remote_word(host.python)
    work_dir = shlex.quote(host.work_dir)
    query = shlex.join(GPU_QUERY)
    program = (
        FACTS_PROGRAM.replace("QUERY[1:]", repr(list(GPU_QUERY[1:])))
        .replace("SMI_TIMEOUT", str(NVIDIA_SMI_TIMEOUT_S))
        .replace("MARKER", repr(MARKER))
    )
    shell = FACTS_SHELL.replace("QUERY", query).replace('"MARKER"', shlex.quote(MARKER))
    body = (
        f"if command -v {python} >/dev/null 2>&1; then {python} - {work_dir}; "
        f"else sh -c {shlex.quote(shell)} distconsole-facts {work_dir} </dev/null; fi"
    )
    line = f"{{ {host.setup}\n}} && {{ {body}; }}" if host.setup else body
    return line, program


def remote_word(path: str) -> str:
    """A quoted shell word for a remote path, letting a leading ``~`` expand on the host."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def parse_facts(stdout: str) -> HostFacts:
    """The facts from a host's output (the last marked line; setup may print before it)."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith(MARKER)]
    if not lines:
        tail = stdout.strip()[-300:] or "(no output)"
        raise TransportError(f"host facts missing from the output: {tail}")
    try:
        data = json.loads(lines[-1][len(MARKER) :])
    except json.JSONDecodeError as exc:
        raise TransportError(f"host facts are not valid JSON: {exc}") from None
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
    return parse_facts(result.stdout)


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
