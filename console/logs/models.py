"""Plain data the log pipeline hands around: lines, batches and follower notes.

``LogLine`` is a NamedTuple rather than a frozen dataclass on purpose: the follower
builds hundreds of thousands of them per second and tuple construction is about
twice as fast, while staying immutable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

RankKey = int | str  # global rank, or a label such as "ps0", "worker1", "launcher@node0"


class LogLine(NamedTuple):
    job_id: str
    host: str
    rank: int | None  # global rank; None for launcher/ps output that names no rank
    local_rank: int | None
    stream: str  # "stdout", "stderr" or "combined"
    text: str  # without the newline and without the launcher prefix
    received: float  # epoch seconds the console received it
    role: str = "rank"  # "rank", "launcher", "ps", "worker", "chief"
    task_index: int | None = None  # ps/worker/chief task index ("index" is a tuple method)


def rank_key(line: LogLine) -> RankKey:
    """The key lines are grouped by: the global rank, else the task, else the host's launcher."""
    if line.rank is not None:
        return line.rank
    if line.task_index is not None:
        return f"{line.role}{line.task_index}"
    if line.local_rank is not None:
        return f"local{line.local_rank}@{line.host}"
    return f"{line.role}@{line.host}"


def runs(lines: Sequence[LogLine]) -> list[tuple[RankKey, Sequence[LogLine]]]:
    """Consecutive lines of the same rank, as (key, lines) slices: a batch is mostly a few
    long runs (one per file chunk), so grouping costs one comparison per line."""
    out: list[tuple[RankKey, Sequence[LogLine]]] = []
    start = 0
    key: RankKey | None = None
    for i, line in enumerate(lines):
        rank = line[2]
        k = rank if rank is not None else rank_key(line)
        if k != key:
            if key is not None:
                out.append((key, lines[start:i]))
            key, start = k, i
    if key is not None:
        out.append((key, lines[start:]))
    return out


def rank_label(key: RankKey) -> str:
    """Short label for prefixes: ``r3``, ``worker1``, ``launcher@node0``."""
    return f"r{key}" if isinstance(key, int) else key


@dataclass(frozen=True, slots=True)
class FollowNote:
    """Something the follower noticed that is not a line (truncation, rotation, ...)."""

    host: str
    path: str
    kind: str  # "truncated", "rotated", "missing", "appeared", "error", "disconnected", "resumed"
    message: str = ""


@dataclass(frozen=True, slots=True)
class FileCursor:
    """Where delivery of one file stands: the next byte to deliver and the file's inode."""

    offset: int = 0
    inode: int | None = None


@dataclass(frozen=True, slots=True)
class LogBatch:
    """Lines that arrived together from one host (possibly from several files)."""

    host: str
    lines: tuple[LogLine, ...]
    notes: tuple[FollowNote, ...] = ()
    received: float = 0.0
    finished: bool = field(default=False)  # the follower reached the end and exited
