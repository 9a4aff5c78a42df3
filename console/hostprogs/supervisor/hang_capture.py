"""Hang detection and per-process hang captures, run by the job's supervisor on a host.

A PART of the supervisor's single source file (it is concatenated, like the sampler's
parts): standard library only, Python >= 3.7, no ``__main__`` block, no module-level
side effects, every name prefixed ``hang_``/``HANG_``. Its interface (the issue-12
contract; the supervisor calls it):

- :func:`hang_last_progress` - the newest progress (epoch) of the named processes: their
  log files' modification times (a step line is a line), at least their start;
- :func:`hang_capture` - for every named process: the state and wchan of each of its
  processes (its process group, plus every process carrying the job's marker variable
  with ``DISTCONSOLE_PROCESS`` naming it: torchrun's workers lead sessions of their own),
  the Python stack of every thread (``faulthandler`` answering :data:`HANG_SIGNAL`,
  registered by ``hang_sitecustomize.py`` which the plan puts on the ranks'
  PYTHONPATH; and ``py-spy dump`` where the host has py-spy), the last log lines, the
  last step and the job's GPUs; written to ``hang/NAME.json`` and ``hang/NAME.stack.txt``;
- :func:`hang_gpu_sample` - one line on ``gpu-samples.jsonl`` (only where a GPU tool is).

A stopped process (SIGSTOP) cannot run a signal handler: its state is recorded and its
stack is said to be unavailable for that reason (py-spy, which reads memory without the
process's help, may still give it).

The process table and the stack sources live in the part just before this one,
``hang_inspect.py``; this part holds the progress rule, the log tails and steps, the
GPUs and the capture that writes the files.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from typing import Any

if __name__ != "__main__":  # imported by the console/tests; on a host the part precedes
    from console.hostprogs.supervisor.hang_inspect import (
        HANG_BUDGET_S,
        HANG_DIR,
        HANG_SIGNAL,
        _hang_finish,
        _hang_size,
        hang_faulthandler_stacks,
        hang_job_processes,
        hang_members,
        hang_process_state,
        hang_pyspy_collect,
        hang_pyspy_start,
    )

HANG_GPU_SAMPLES = "gpu-samples.jsonl"
HANG_RANKS_DIR = "ranks"  # paths.ranks_dir: mpirun / horovodrun per-rank output
HANG_LOG_SUFFIXES = (".out", ".err")  # paths.STDOUT_SUFFIX, STDERR_SUFFIX
HANG_START_SUFFIXES = (".pgid", ".sh")  # written when the process starts
HANG_FLIGHT_RECORDER_PREFIX = "nccl_trace_rank_"  # TORCH_FR_DUMP_TEMP_FILE's basename
# A Ray node's logs, through the job directory's link to its temp dir (plan/ray.py
# TEMP_LINK, and Ray's session_latest/logs): its workers' output files.
HANG_RAY_LOGS = ("ray-tmp", "session_latest", "logs")
HANG_RAY_WORKER = "worker-"
HANG_LAST_LINES = 20
HANG_TAIL_BYTES = 65536

# console/logs/steps.py DEFAULT_STEP_PATTERNS, the one owner of the step rule; a
# contract test (tests/unit/test_hang_capture_contract.py) keeps this copy equal.
_HANG_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_HANG_SEP = r"[ \t]*[:=#]?[ \t]*"
HANG_STEP_PATTERNS = (
    r"\d+%\|[^|\n]*\|[ \t]*(?P<step>\d+)/(?P<total>\d+)[ \t]*\[",
    r"\bepoch" + _HANG_SEP + r"\[?(?P<epoch>\d+)(?:/\d+)?\]?[ \t,;|-]*"
    r"(?:global[_ ])?(?:step|iter(?:ation)?|batch)"
    + _HANG_SEP
    + r"\[?(?P<step>\d+)(?:/(?P<total>\d+))?",
    r"\b(?:global[_ ])?step" + _HANG_SEP + r"\[?(?P<step>\d+)(?:[ \t]*/[ \t]*(?P<total>\d+))?",
    r"\biter(?:ation)?" + _HANG_SEP + r"\[?(?P<step>\d+)(?:[ \t]*/[ \t]*(?P<total>\d+))?",
)


def _hang_write_atomic(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def hang_log_files(job_dir: str, name: str) -> list[str]:
    """The files whose growth is the process's progress: its stdout/stderr, plus the
    per-rank files mpirun/horovodrun write (only their launcher uses ``ranks/``)."""
    found = [os.path.join(job_dir, name + suffix) for suffix in HANG_LOG_SUFFIXES]
    ranks = os.path.join(job_dir, HANG_RANKS_DIR)
    for root, _dirs, files in os.walk(ranks):
        found.extend(os.path.join(root, f) for f in sorted(files))
    return [p for p in found if os.path.isfile(p)]


def hang_ray_worker_logs(job_dir: str) -> list[str]:
    """A Ray node's workers' ``worker-*.out``/``.err`` (a Ray job's job directory links
    to its node's temp dir). What a task or actor prints lands there, and Ray writes a
    ``:task_name:`` line at each task's start; the driver's output gets them only with
    ``log_to_driver`` (a driver started with ``ray.init(log_to_driver=False)`` prints
    nothing while its tasks work). Not the raylet's, GCS's or core workers' logs: those
    print event statistics every minute, hung or not. Progress only: a capture's last
    lines stay its process's own (the report packs the workers' files)."""
    logs = os.path.join(job_dir, *HANG_RAY_LOGS)
    try:
        names = sorted(os.listdir(logs))
    except OSError:
        return []
    return [
        os.path.join(logs, n)
        for n in names
        if n.startswith(HANG_RAY_WORKER) and n.endswith(HANG_LOG_SUFFIXES)
    ]


def hang_last_progress(job_dir: str, names: list) -> float:
    """Newest progress time (epoch) of the named processes: the newest modification of
    their log files (and a Ray node's workers' output), and at least when they started
    (a rank that has printed nothing yet is measured from its start). 0.0 when none of
    them has started here."""
    job_dir = os.path.expanduser(job_dir)
    newest = 0.0
    for name in names:
        for suffix in HANG_START_SUFFIXES:
            with contextlib.suppress(OSError):
                newest = max(newest, os.stat(os.path.join(job_dir, name + suffix)).st_mtime)
        for path in hang_log_files(job_dir, name):
            with contextlib.suppress(OSError):
                newest = max(newest, os.stat(path).st_mtime)
    for path in hang_ray_worker_logs(job_dir) if names else []:
        with contextlib.suppress(OSError):
            newest = max(newest, os.stat(path).st_mtime)
    return newest


# --- logs, steps, GPUs ---------------------------------------------------------------


def hang_tail(path: str, count: int = HANG_LAST_LINES) -> list[str]:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - HANG_TAIL_BYTES))
            data = handle.read()
    except OSError:
        return []
    lines = data.decode(errors="replace").splitlines()
    if size > HANG_TAIL_BYTES and lines:
        lines = lines[1:]  # the first one is cut
    lines = [ln for ln in lines if ln.strip()]
    return lines[-count:] if count else lines


_HANG_STEP_RES: list = []


def hang_last_step(lines: list) -> dict[str, Any] | None:
    """The newest step in ``lines`` by the step rule (first matching pattern wins)."""
    if not _HANG_STEP_RES:
        _HANG_STEP_RES.extend(re.compile(p, re.IGNORECASE) for p in HANG_STEP_PATTERNS)
    for line in reversed(lines):
        for pattern in _HANG_STEP_RES:
            m = pattern.search(line)
            if m is not None:
                found = m.groupdict()
                return {
                    "step": int(found["step"]),
                    "epoch": int(found["epoch"]) if found.get("epoch") else None,
                    "total": int(found["total"]) if found.get("total") else None,
                    "line": line[-400:],
                }
    return None


def _hang_start(argv: list) -> Any:
    try:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
    except OSError:
        return None


def _hang_csv(child: Any, deadline: float) -> list[list[str]] | None:
    out = None if child is None else _hang_finish(child, deadline)
    if out is None or out.startswith(b"\0"):
        return None
    rows = []
    for line in out.decode(errors="replace").splitlines():
        if line.strip():
            rows.append([cell.strip() for cell in line.split(",")])
    return rows


def _hang_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def hang_gpus_start() -> tuple | None:
    """Start the two nvidia-smi queries (GPUs, compute processes); None without it."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None
    fields = "index,uuid,utilization.gpu,memory.used,memory.total"
    return (
        _hang_start([tool, "--query-gpu=" + fields, "--format=csv,noheader,nounits"]),
        _hang_start([tool, "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader,nounits"]),
    )


def hang_gpus(started: tuple | None, job_pids: set, deadline: float) -> list[dict[str, Any]] | None:
    """This host's GPUs from nvidia-smi, each marked ``job`` when a process of the job
    runs on it (with those pids); None without nvidia-smi (or no answer in time)."""
    if started is None:
        return None
    rows = _hang_csv(started[0], deadline)
    apps = _hang_csv(started[1], deadline)
    if rows is None:
        return None
    on_gpu: dict[str, list[int]] = {}
    for app in apps or []:
        if len(app) >= 2 and app[0].isdigit() and int(app[0]) in job_pids:
            on_gpu.setdefault(app[1], []).append(int(app[0]))
    gpus = []
    for row in rows:
        if len(row) < 5:
            continue
        gpus.append(
            {
                "index": int(row[0]) if row[0].isdigit() else row[0],
                "uuid": row[1],
                "util_pct": _hang_number(row[2]),
                "mem_used_mib": _hang_number(row[3]),
                "mem_total_mib": _hang_number(row[4]),
                "job": row[1] in on_gpu,
                "job_pids": sorted(on_gpu.get(row[1], [])),
            }
        )
    return gpus


def _hang_job_id(job_dir: str) -> str:
    return os.path.basename(job_dir.rstrip("/"))


def hang_gpu_sample(job_dir: str) -> None:
    """Append one sample of this host's GPUs (which ones hold the job's processes) to
    ``gpu-samples.jsonl``; nothing where no GPU tool exists."""
    if shutil.which("nvidia-smi") is None:
        return
    job_dir = os.path.expanduser(job_dir)
    job_id = _hang_job_id(job_dir)
    pids = {p["pid"] for p in hang_job_processes(job_id) if p["job"]}
    gpus = hang_gpus(hang_gpus_start(), pids, time.time() + HANG_BUDGET_S)
    if gpus is None:
        return
    line = json.dumps({"t": time.time(), "gpus": gpus}, separators=(",", ":"))
    with open(os.path.join(job_dir, HANG_GPU_SAMPLES), "a") as handle:
        handle.write(line + "\n")


def hang_flight_recorder(job_dir: str) -> list[dict[str, Any]]:
    """What PyTorch's flight recorder dumped (TORCH_FR_DUMP_TEMP_FILE points at hang/)."""
    folder = os.path.join(job_dir, HANG_DIR)
    found: list[dict[str, Any]] = []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return found
    for entry in names:
        if entry.startswith(HANG_FLIGHT_RECORDER_PREFIX):
            found.append({"file": entry, "bytes": _hang_size(os.path.join(folder, entry))})
    return found


# --- the capture ---------------------------------------------------------------------


def _hang_stack_text(name: str, record: dict[str, Any]) -> str:
    out = [f"# {name} (rank {record['rank']}) captured at {record['at_text']}"]
    for state in record["processes"]:
        out.append("")
        out.append(
            f"== pid {state['pid']} {state['comm']} [{state['state_name']}, "
            f"wchan {state['wchan'] or '-'}] {state['cmdline']}"
        )
        if state.get("faulthandler"):
            out.append(f"-- faulthandler ({HANG_SIGNAL.name}):")
            out.append(state["faulthandler"].rstrip())
        elif state.get("faulthandler_problem"):
            out.append("-- no faulthandler stack: " + state["faulthandler_problem"])
        if state.get("py_spy"):
            out.append("-- py-spy dump:")
            out.append(state["py_spy"].rstrip())
        elif state.get("py_spy_problem") and state["python"]:
            out.append("-- no py-spy stack: " + state["py_spy_problem"])
    return "\n".join(out) + "\n"


def hang_capture(job_dir: str, procs: list) -> dict[str, Any]:
    """Capture every named process of the job on this host (``procs``: ``[{"name",
    "rank", "pgid"}]``), write ``hang/NAME.json`` and ``hang/NAME.stack.txt``, and
    return ``{"captured": [names], "at", "processes": {name: summary}, "gpus",
    "flight_recorder"}``."""
    job_dir = os.path.expanduser(job_dir)
    folder = os.path.join(job_dir, HANG_DIR)
    os.makedirs(folder, exist_ok=True)
    at = time.time()
    table = hang_job_processes(_hang_job_id(job_dir))
    members = {}
    for proc in procs:
        members[proc["name"]] = [
            hang_process_state(m) for m in hang_members(table, proc["name"], proc.get("pgid"))
        ]
    deadline = at + HANG_BUDGET_S
    every = [s for name in members for s in members[name]]
    # The tools start first and run while every hooked process answers the stack signal
    # (sent to all at once, so their stacks are of one moment); one deadline for all.
    spies = hang_pyspy_start(every)
    gpu_queries = hang_gpus_start()
    hang_faulthandler_stacks(job_dir, [(p["name"], members[p["name"]]) for p in procs], deadline)
    hang_pyspy_collect(spies, deadline)
    job_pids = {s["pid"] for s in every} | {p["pid"] for p in table if p["job"]}
    gpus = hang_gpus(gpu_queries, job_pids, deadline)
    job_gpus = None if gpus is None else [g for g in gpus if g["job"]] or gpus
    recorder = hang_flight_recorder(job_dir)
    result: dict[str, Any] = {
        "captured": [],
        "at": at,
        "processes": {},
        "gpus": job_gpus,
        "flight_recorder": recorder,
    }
    for proc in procs:
        name = proc["name"]
        tails = {}
        lines: list[str] = []
        for path in hang_log_files(job_dir, name):
            tail = hang_tail(path)
            tails[os.path.relpath(path, job_dir)] = tail
            lines.extend(hang_tail(path, 0) if tail else [])
        record = {
            "v": 1,
            "name": name,
            "rank": proc.get("rank"),
            "pgid": proc.get("pgid"),
            "at": at,
            "at_text": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)),
            "processes": members[name],
            "last_lines": tails,
            "last_step": hang_last_step(lines),
            "last_progress": hang_last_progress(job_dir, [name]),
            "gpus": job_gpus,
            "flight_recorder": recorder,
        }
        _hang_write_atomic(os.path.join(folder, name + ".json"), json.dumps(record, indent=1))
        _hang_write_atomic(
            os.path.join(folder, name + ".stack.txt"), _hang_stack_text(name, record)
        )
        result["captured"].append(name)
        result["processes"][name] = {
            "states": sorted({s["state_name"] for s in members[name]}),
            "stacks": sum(1 for s in members[name] if s.get("faulthandler") or s.get("py_spy")),
            "last_step": record["last_step"]["step"] if record["last_step"] else None,
        }
    return result
