"""The hang capture's look at this host's processes: the process table, Python stacks.

A PART of the supervisor's single source file, ahead of ``hang_capture.py`` (which
uses it; see that part's doc for the capture as a whole): standard library only,
Python >= 3.7, no ``__main__`` block, no module-level side effects, every name
prefixed ``hang_``/``HANG_``. It reads ``/proc`` for the job's processes (its process
groups, plus every process carrying the job's marker variable), their state, wchan,
threads and command line, and gets their Python stacks: ``faulthandler`` answering
:data:`HANG_SIGNAL` (registered by ``hang_sitecustomize.py``) and ``py-spy dump``
where the host has py-spy.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from typing import Any

HANG_DIR = "hang"  # in the job directory
# Not used by torchrun (it forwards TERM, INT, HUP, QUIT unless told otherwise), Open
# MPI (it intercepts 6,7,8,11 and only forwards USR2 from mpirun to ranks) or horovodrun.
HANG_SIGNAL = signal.SIGUSR2
HANG_STACKS_SUFFIX = ".stacks"  # hang/NAME.PID.stacks, opened by the sitecustomize hook
HANG_MARKER_VAR = "DISTCONSOLE_JOB_ID"  # names.JOB_ID_VAR
HANG_PROCESS_VAR = "DISTCONSOLE_PROCESS"  # remote_ops.PROCESS_VAR
# The whole capture fits in this budget: the supervisor captures in its own loop, and
# its peers take a host silent for 4 s (jobs/supervision.SILENCE_S) as lost. py-spy and
# nvidia-smi run while the stack signal is answered, all against one deadline.
HANG_BUDGET_S = 2.5
HANG_MAX_THREADS = 64  # per process, in the capture's thread list

HANG_STATES = {
    "R": "running",
    "S": "sleeping",
    "D": "disk sleep",
    "T": "stopped",
    "t": "tracing stop",
    "Z": "zombie",
    "X": "dead",
    "I": "idle",
    "P": "parked",
    "W": "paging",
}


def _hang_read(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode(errors="replace")
    except OSError:
        return None


# --- the process table ---------------------------------------------------------------


def _hang_stat(pid: int) -> dict[str, Any] | None:
    text = _hang_read(f"/proc/{pid}/stat")
    if not text:
        return None
    close = text.rfind(")")
    fields = text[close + 2 :].split()
    if len(fields) < 3:
        return None
    return {
        "pid": pid,
        "comm": text[text.find("(") + 1 : close],
        "state": fields[0],
        "ppid": int(fields[1]),
        "pgid": int(fields[2]),
    }


def _hang_environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return {}
    env = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep and key in (HANG_MARKER_VAR.encode(), HANG_PROCESS_VAR.encode()):
            env[key.decode()] = value.decode(errors="replace")
    return env


def hang_job_processes(job_id: str) -> list[dict[str, Any]]:
    """Every process on this machine, with the job's marker variables where readable
    (zombies included: they have no environment but keep their process group)."""
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        stat = _hang_stat(int(entry))
        if stat is None:
            continue
        env = _hang_environ(stat["pid"])
        stat["job"] = env.get(HANG_MARKER_VAR) == job_id
        stat["process"] = env.get(HANG_PROCESS_VAR) if stat["job"] else None
        found.append(stat)
    return found


def hang_members(table: list, name: str, pgid: int | None) -> list[dict[str, Any]]:
    """The processes of the job's process ``name``: its group, and marked descendants
    that left it (torchrun's workers lead sessions of their own)."""
    return sorted(
        (p for p in table if (pgid is not None and p["pgid"] == pgid) or p["process"] == name),
        key=lambda p: p["pid"],
    )


def _hang_wchan(path: str) -> str | None:
    text = _hang_read(path)
    text = text.strip() if text else ""
    return None if text in ("", "0") else text


def hang_cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:400]


def hang_threads(pid: int) -> list[dict[str, Any]]:
    """Each thread's name, state and wchan (where in the kernel it sleeps: futex_wait...)."""
    threads: list[dict[str, Any]] = []
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if t.isdigit())
    except OSError:
        return threads
    for tid in tids[:HANG_MAX_THREADS]:
        stat = _hang_stat_path(f"/proc/{pid}/task/{tid}/stat")
        if stat is None:
            continue
        threads.append(
            {
                "tid": tid,
                "name": stat[0],
                "state": stat[1],
                "wchan": _hang_wchan(f"/proc/{pid}/task/{tid}/wchan"),
            }
        )
    return threads


def _hang_stat_path(path: str) -> tuple[str, str] | None:
    text = _hang_read(path)
    if not text:
        return None
    close = text.rfind(")")
    return text[text.find("(") + 1 : close], text[close + 2 : close + 3]


def hang_is_python(pid: int, cmdline: str, comm: str) -> bool:
    if "python" in comm.lower():
        return True
    first = cmdline.split(" ", 1)[0]
    return "python" in os.path.basename(first).lower()


def hang_process_state(member: dict[str, Any]) -> dict[str, Any]:
    pid = member["pid"]
    cmdline = hang_cmdline(pid)
    return {
        "pid": pid,
        "ppid": member["ppid"],
        "pgid": member["pgid"],
        "comm": member["comm"],
        "cmdline": cmdline,
        "state": member["state"],
        "state_name": HANG_STATES.get(member["state"], member["state"]),
        "wchan": _hang_wchan(f"/proc/{pid}/wchan"),
        "python": hang_is_python(pid, cmdline, member["comm"]),
        "threads": hang_threads(pid) if member["state"] not in ("Z", "X") else [],
    }


# --- Python stacks -------------------------------------------------------------------


def hang_stacks_path(job_dir: str, name: str, pid: int) -> str:
    """Where the sitecustomize hook of process ``pid`` (of the job's ``name``) writes."""
    return os.path.join(job_dir, HANG_DIR, f"{name}.{pid}{HANG_STACKS_SUFFIX}")


def _hang_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def hang_faulthandler_stacks(job_dir: str, named: list, deadline: float) -> None:
    """Ask every hooked process (``named``: [(name, states)]) for its stacks at once
    (the signal), then wait until ``deadline`` for each file to grow and settle. Fills
    ``faulthandler`` and ``faulthandler_problem`` of each state."""
    asked = {}
    for name, state in ((n, st) for n, states in named for st in states):
        pid = state["pid"]
        path = hang_stacks_path(job_dir, name, pid)
        hooked = os.path.exists(path)
        state["faulthandler"] = None
        if state["state"] in ("Z", "X"):
            state["faulthandler_problem"] = "a zombie has no stack (it has exited)"
        elif not hooked:
            state["faulthandler_problem"] = (
                "no faulthandler hook in this process"
                if state["python"]
                else "not a Python process"
            )
        elif state["state"] in ("T", "t"):
            state["faulthandler_problem"] = (
                "the process is stopped (SIGSTOP): it cannot answer the stack signal"
            )
        else:
            try:
                before = _hang_size(path)
                os.kill(pid, HANG_SIGNAL)
                asked[pid] = (state, path, before)
                state["faulthandler_problem"] = None
            except OSError as exc:
                state["faulthandler_problem"] = f"could not signal it: {exc}"
    last_sizes: dict[int, int] = {}
    while asked and time.time() < deadline:
        time.sleep(0.05)
        for pid, (state, path, before) in list(asked.items()):
            size = _hang_size(path)
            # faulthandler writes every thread in one go from the signal handler: the
            # dump is whole once the file grew and then stayed the same for a poll.
            if size > before and last_sizes.get(pid) == size:
                state["faulthandler"] = _hang_read_from(path, before)
                del asked[pid]
            last_sizes[pid] = size
    for state, path, before in asked.values():
        text = _hang_read_from(path, before)
        if text:
            state["faulthandler"] = text
        else:
            state["faulthandler_problem"] = (
                f"no answer within {HANG_BUDGET_S:.1f} s "
                f"(a handler of its own for {HANG_SIGNAL.name}?)"
            )


def _hang_read_from(path: str, offset: int) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(offset, 0))
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def hang_pyspy_start(states: list) -> list:
    """Start ``py-spy dump`` of every live Python process at once, where py-spy is on
    PATH. A stopped process is read without attaching (``--nonblocking``): py-spy reads
    its memory, which needs nothing from the process."""
    tool = shutil.which("py-spy")
    running = []
    for state in states:
        state["py_spy"] = None
        if tool is None or not state["python"] or state["state"] in ("Z", "X"):
            state["py_spy_problem"] = None if state["python"] else "not a Python process"
            if tool is None and state["python"]:
                state["py_spy_problem"] = "py-spy is not on PATH"
            continue
        argv = [tool, "dump", "--pid", str(state["pid"])]
        if state["state"] in ("T", "t"):
            argv.append("--nonblocking")
        try:
            child = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        except OSError as exc:
            state["py_spy_problem"] = f"py-spy did not start: {exc}"
            continue
        running.append((state, child))
    return running


def _hang_finish(child: Any, deadline: float) -> bytes | None:
    """The child's output, or None when it did not end by ``deadline`` (it is killed)."""
    try:
        out, _err = child.communicate(timeout=max(0.05, deadline - time.time()))
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return None
    return out if child.returncode == 0 else b"\0" + out


def hang_pyspy_collect(running: list, deadline: float) -> None:
    for state, child in running:
        out = _hang_finish(child, deadline)
        if out is None:
            state["py_spy_problem"] = f"py-spy gave no answer within {HANG_BUDGET_S:.1f} s"
            continue
        failed = out.startswith(b"\0")
        text = out.lstrip(b"\0").decode(errors="replace")
        if not failed:
            state["py_spy"] = text
            state["py_spy_problem"] = None
        else:
            state["py_spy_problem"] = f"py-spy failed ({child.returncode}): {text.strip()[-300:]}"
