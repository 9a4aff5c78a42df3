"""The facts probe: what a host is (OS, kernel, CPUs, memory, Python, torch, GPUs, disk).

Sent on stdin to the host's ``python3 - WORK_DIR`` after its setup line (so the Python
asked is the one jobs will use). Prints two marked lines: the versioned hello, then the
facts as one JSON object; ``console/probe/facts.py`` reads them, and its ``sh`` fallback
prints the same two lines on hosts without that Python.

Runs under any Python 3.6+ with the standard library only: no f-strings with ``=``, no
walrus, no ``from __future__ import annotations`` (3.7). torch is looked up with
``importlib.util.find_spec`` and its version read from package metadata: importing
torch would take seconds per host.
"""

import json
import os
import platform
import shutil
import subprocess
import sys

PROGRAM = "facts"
VERSION = 1
MARKER = "DISTCONSOLE_FACTS "
GPU_QUERY = ("nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv")
NVIDIA_SMI_TIMEOUT_S = 10


def _os_name(sysname: str) -> "str | None":
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip("\"'")
    except OSError:
        return sysname
    return None


def _memory_total() -> "int | None":
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _torch() -> "str | None":
    try:
        import importlib.util

        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return None
    try:
        from importlib.metadata import version

        return version("torch")
    except Exception:  # metadata missing or unreadable: installed, version unknown
        return "unknown"


def _nvidia_smi() -> "dict[str, str]":
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {"status": "missing", "output": ""}
    try:
        done = subprocess.run(
            [smi, *GPU_QUERY[1:]],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            encoding="utf-8",
            errors="replace",  # an odd byte in a GPU name must not lose the facts
            timeout=NVIDIA_SMI_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return {"status": "failed", "output": "timed out"}
    except OSError as e:
        return {"status": "failed", "output": str(e)}
    status = "ok" if done.returncode == 0 else "failed"
    return {"status": status, "output": done.stdout[-20000:]}


def main(argv: "list[str]") -> int:
    sys.stdout.write(MARKER + json.dumps({"program": PROGRAM, "v": VERSION}) + "\n")
    facts = {"via": "python"}  # type: dict[str, object]
    notes = []  # type: list[str]
    u = os.uname()
    facts["hostname"], facts["kernel"], facts["arch"] = u.nodename, u.release, u.machine
    facts["os"] = _os_name(u.sysname)
    try:
        facts["cpus"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        facts["cpus"] = os.cpu_count()
    facts["memory_total_bytes"] = _memory_total()
    facts["python"] = platform.python_version()
    facts["python_path"] = sys.executable
    facts["torch"] = _torch()
    facts["nvidia_smi"] = _nvidia_smi()
    wd = os.path.expanduser(argv[0] if argv else "~")
    facts["work_dir"] = wd
    facts["disk_free_bytes"] = None
    try:
        os.makedirs(wd, exist_ok=True)
        facts["disk_free_bytes"] = shutil.disk_usage(wd).free
    except OSError as e:
        notes.append(f"work_dir {wd}: {e.strerror or e}")
    facts["notes"] = notes
    sys.stdout.write(MARKER + json.dumps(facts) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
