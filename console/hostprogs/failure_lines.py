"""Which lines of a failed process's output say what went wrong.

One owner for "this line reports an error": the failure summary of a job (here) and the
logs screen's "first error" (console/logs/buffer.py) use the same pattern.

Launchers end a failure with a block of their own (torchrun's ChildFailedError report,
mpirun's "one or more processes exited with non-zero status"): the last lines of the
output are that block, which names the failing rank but not the cause. The cause is the
first error a rank printed before the launcher's block.

Also a part of the host supervisor's single source (``supervisor.py``), which reads the
failing process's output on its own host: standard library only, Python >= 3.7.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

ERROR_PATTERN = re.compile(
    r"Traceback \(most recent call last\)|Error\b|NCCL error|exited with|"
    r"\bexitcode\b|Segmentation fault|\bFATAL\b|\bKilled\b|CUDA out of memory|"
    r"can't open file|No such file or directory|command not found|Permission denied",
)
# Lowercase words one of which every ERROR_PATTERN match contains: a substring test on
# a batch is far cheaper than the regex when there is no error (the usual case).
ERROR_HINTS = (
    "traceback",
    "error",
    "exited with",
    "exitcode",
    "fault",
    "fatal",
    "killed",
    "can't open",
    "no such file",
    "not found",
    "denied",
)
# Where a launcher's own failure report begins: everything from here on is the launcher
# describing the failure, not the failure.
LAUNCHER_REPORT = re.compile(
    r"torch/distributed/elastic/multiprocessing/api\.py:\d+\] failed \(exitcode|"
    r"torch\.distributed\.elastic\.multiprocessing\.errors\.ChildFailedError|"
    r"Primary job\s+terminated normally, but|"
    r"mpirun detected that one or more processes exited with non-zero status|"
    r"horovod\.runner\.common\.util\.network\.NoValidAddressesFound|"
    r"Process \d+ exit with status code \d+",
)
_RULE = re.compile(r"-{20,}")
# Open MPI names the first rank that failed in its report ("The first process to do so
# was: Process name: [[JOBID,STEP],RANK]"; Open MPI 5's prterun: [prterun-HOST-PID@STEP,RANK]).
MPI_FAILED_PROCESS = re.compile(r"Process name:\s*\[(?:\[\d+,\d+\]|[^\]\s,]*@\d+),(\d+)\]")
CONTEXT_LINES = 8  # after the first error line, when it is no traceback
TRACEBACK_LINES = 80  # a traceback is shown to its message, up to this many lines
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
# A launcher's prefix on a rank's line: torchrun's [default0]:, mpirun's [1,0]<stderr>:,
# horovodrun's [0]<stderr>:.
_PREFIX = re.compile(r"^\[[^\]]*\](?:<std(?:out|err)>)?:")
# torchrun's ChildFailedError report: "Failures:" (the consequences) and "Root Cause
# (first observed failure):", each entry "[i]:" then "  field : value" lines.
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\)")
_FAILURES = re.compile(r"^\s*Failures:\s*$")
_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*?)\s*$")
_RANK = re.compile(r"(-?\d+)(?:\s*\(local_rank:\s*(\d+)\))?")
_EXITCODE = re.compile(r"(-?\d+)")
_TOLD = re.compile(r"root cause: rank (\d+)")
_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}


# What a process prints when it failed because another did: a peer gone from under a
# collective (gloo, NCCL, gRPC), or a signal someone sent it (a stop, a launcher's
# teardown). Its failure is a consequence; the job's cause is the other one.
PEER_LOST = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|"
    r"typically caused by a remote worker crashing|remote process exited|"
    r"NCCL communicator was aborted|Socket closed|"
    r"killed by SIG(?:TERM|KILL|INT|HUP)\b|death signal|SignalException|got signal"
)


# A torchrun whose root cause (its first observed failure) is a rank killed by one of
# these followed another: a stop's signal, or gloo's abort when a peer vanished from
# under a collective (SIGABRT, with no line of its own saying so).
CONSEQUENCE_SIGNALS = ("SIGABRT", "SIGTERM", "SIGKILL", "SIGINT", "SIGHUP")
_TOLD_KILLED = re.compile(
    r"root cause: rank \d+.*: killed by (" + "|".join(CONSEQUENCE_SIGNALS) + r")\b"
)


def followed_another(lines: Sequence[str]) -> bool:
    """True when a failure's own lines say it followed another's (:data:`PEER_LOST`), or
    torchrun's root cause among them is a rank a :data:`CONSEQUENCE_SIGNALS` killed."""
    if any(PEER_LOST.search(line) or _TOLD_KILLED.search(line) for line in lines):
        return True
    root, _others = torchrun_failures(lines)
    return root is not None and root["signal"] in CONSEQUENCE_SIGNALS


def first_error(lines: Sequence[str], context: int = CONTEXT_LINES) -> tuple[str, ...]:
    """The first error line before any launcher report, with up to ``context`` lines
    after it (not reaching into the report); else, when a launcher reported, the last
    ``context`` lines before its report; () when there is neither."""
    end = next((i for i, line in enumerate(lines) if LAUNCHER_REPORT.search(line)), len(lines))
    if 0 < end < len(lines) and _RULE.fullmatch(lines[end - 1].strip()):
        end -= 1  # mpirun opens its report with a rule of dashes
    for i in range(end):
        if ERROR_PATTERN.search(lines[i]):
            if _TRACEBACK.search(lines[i]):
                return tuple(lines[i : _traceback_end(lines, i, end)])
            return tuple(lines[i : min(end, i + 1 + context)])
    if end < len(lines):
        # No line says "error" (a rank that printed why and exited non-zero): its last
        # words before the launcher's report are the cause.
        return tuple(line for line in lines[:end] if line.strip())[-context:]
    return ()


def failed_rank(lines: Sequence[str]) -> int | None:
    """The rank a launcher's failure report names as the first that failed (Open MPI's
    "Process name: [[x,y],R]", torchrun's root cause, or a cause already told as "root
    cause: rank R"), or None when no report names one."""
    for line in lines:
        found = MPI_FAILED_PROCESS.search(line) or _TOLD.match(line)
        if found is not None:
            return int(found.group(1))
    root, _others = torchrun_failures(lines)
    return root["rank"] if root is not None else None


def failure_cause(lines: Sequence[str], host: str | None = None) -> tuple[str, ...]:
    """What a failure summary shows as the cause: torchrun's root cause told in full when
    it reported one (:func:`root_cause`; ``host``: the inventory name of the host whose
    output ``lines`` are), else the first error (:func:`first_error`)."""
    told = root_cause(lines, host=host)
    return tuple(told[1]) if told is not None else first_error(lines)


def _unprefixed(line: str) -> str:
    return _PREFIX.sub("", line, count=1)


def _traceback_end(lines: Sequence[str], start: int, end: int) -> int:
    """One past a traceback's message: the first line after ``start`` that is not a frame
    (indented) of the same rank. Its message is what the reader needs; cut at
    TRACEBACK_LINES in case the frames never end."""
    prefix = _PREFIX.match(lines[start])
    own = prefix.group(0) if prefix else ""
    limit = min(end, start + TRACEBACK_LINES)
    for i in range(start + 1, limit):
        if own and not lines[i].startswith(own):
            continue  # another rank's line, interleaved
        body = _unprefixed(lines[i]) if own else lines[i]
        if body.strip() and not body[:1].isspace():
            return i + 1
    return limit


def _entries(lines: Sequence[str]) -> list[dict]:
    """The "[i]:" entries of a torchrun report section, each as its fields."""
    found: list[dict] = []
    for line in lines:
        field = _FIELD.match(line)
        if line.strip().startswith("[") and line.strip().endswith("]:"):
            found.append({})
        elif field is not None and found:
            found[-1][field.group(1)] = field.group(2)
    return found


def _described(entry: dict) -> dict:
    rank = _RANK.match(entry.get("rank", ""))
    code = _EXITCODE.match(entry.get("exitcode", ""))
    exit_code = int(code.group(1)) if code else None
    signal = None
    if exit_code is not None and exit_code < 0:
        signal = _SIGNALS.get(-exit_code, f"signal {-exit_code}")
    return {
        "rank": int(rank.group(1)) if rank else None,
        "local_rank": int(rank.group(2)) if rank and rank.group(2) is not None else None,
        "exit_code": exit_code,
        "signal": signal,
        "time": entry.get("time"),
        "host": entry.get("host"),
    }


def torchrun_failures(lines: Sequence[str]) -> tuple[dict | None, list[dict]]:
    """torchrun's own report: its root cause (first observed failure) and the failures
    it lists besides, each ``{rank, local_rank, exit_code, signal, time, host}``."""
    root_at = next((i for i, ln in enumerate(lines) if _ROOT_CAUSE.search(ln)), None)
    if root_at is None:
        return None, []
    roots = _entries(lines[root_at + 1 :])
    start = next((i for i in range(root_at - 1, -1, -1) if _FAILURES.match(lines[i])), root_at)
    others = [_described(e) for e in _entries(lines[start + 1 : root_at])]
    root = _described(roots[0]) if roots else None
    if root is None or root["rank"] is None:
        return None, []
    return root, [o for o in others if o["rank"] is not None and o["rank"] != root["rank"]]


def _how(failure: dict) -> str:
    if failure["signal"]:
        return f"killed by {failure['signal']}"
    return f"exit status {failure['exit_code']}"


def root_cause(
    lines: Sequence[str], context: int = CONTEXT_LINES, host: str | None = None
) -> tuple[int, list[str]] | None:
    """When torchrun reported a root cause: its rank, and the lines that tell it — the
    rank, where (``host``, the inventory's name, when the caller knows whose output this
    is: torchrun's own is the machine's hostname or ``localhost``), how it ended and when,
    that rank's first error (a traceback to its message) or else its last lines, then the
    failures that followed it. None without such a report."""
    root, others = torchrun_failures(lines)
    if root is None:
        return None
    host = host or root["host"]
    where = f" on {host}" if host else ""
    local = root["local_rank"]
    told = [f"root cause: rank {root['rank']}{where}: {_how(root)}"]
    if root["time"]:
        told[0] += f" at {root['time']}"
    if local is not None:
        own = f"[default{local}]:"
        end = next((i for i, ln in enumerate(lines) if LAUNCHER_REPORT.search(ln)), len(lines))
        mine = [ln for ln in lines[:end] if ln.startswith(own)]
        cause = list(first_error(mine, context)) if mine else []
        if not cause:
            cause = [ln for ln in mine if _unprefixed(ln).strip()][-context:]
            if cause:
                told.append("its last lines:")
        told += cause
    for other in others:
        told.append(f"then rank {other['rank']}: {_how(other)}")
    return root["rank"], told
