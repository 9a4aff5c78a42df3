"""Which lines of a failed process's output say what went wrong: the rule lives in
``console/hostprogs/failure_lines.py``, because the host supervisor ships the same file
as a part of its source (one copy of the rule on both ends); re-exported here."""

from console.hostprogs.failure_lines import (
    CONTEXT_LINES,
    ERROR_HINTS,
    ERROR_PATTERN,
    LAUNCHER_REPORT,
    failed_rank,
    failure_cause,
    first_error,
    root_cause,
    torchrun_failures,
)

__all__ = [
    "CONTEXT_LINES",
    "ERROR_HINTS",
    "ERROR_PATTERN",
    "LAUNCHER_REPORT",
    "failed_rank",
    "failure_cause",
    "first_error",
    "root_cause",
    "torchrun_failures",
]
