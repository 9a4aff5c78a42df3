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
CONTEXT_LINES = 8  # after the first error line: a traceback's frames and its message


def first_error(lines: Sequence[str], context: int = CONTEXT_LINES) -> tuple[str, ...]:
    """The first error line before any launcher report, with up to ``context`` lines
    after it (not reaching into the report); else, when a launcher reported, the last
    ``context`` lines before its report; () when there is neither."""
    end = next((i for i, line in enumerate(lines) if LAUNCHER_REPORT.search(line)), len(lines))
    if 0 < end < len(lines) and _RULE.fullmatch(lines[end - 1].strip()):
        end -= 1  # mpirun opens its report with a rule of dashes
    for i in range(end):
        if ERROR_PATTERN.search(lines[i]):
            return tuple(lines[i : min(end, i + 1 + context)])
    if end < len(lines):
        # No line says "error" (a rank that printed why and exited non-zero): its last
        # words before the launcher's report are the cause.
        return tuple(line for line in lines[:end] if line.strip())[-context:]
    return ()


def failed_rank(lines: Sequence[str]) -> int | None:
    """The rank a launcher's failure report names as the first that failed (Open MPI's
    "Process name: [[x,y],R]"), or None when no report names one."""
    for line in lines:
        found = MPI_FAILED_PROCESS.search(line)
        if found is not None:
            return int(found.group(1))
    return None
