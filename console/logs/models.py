"""Plain data the log pipeline hands around: lines, runs of lines, batches, notes.

Lines travel in *runs*: consecutive lines of one file (one rank, one stream) that
arrived together share one :class:`LineSource` and one receive time, and their text is
kept joined by ``"\\n"`` as it came off the wire. Storing, step reading and error
spotting then work per run at C speed (one regex / substring scan over the run's
text) instead of per line in Python; a :class:`LogLine` is only built for a line
somebody looks at (the view's tail, a CLI print). :class:`LineRuns` is a read-only
``Sequence[LogLine]`` over runs, so code written against lines keeps working.

``LogLine`` stays a NamedTuple: cheap to build for the lines that are materialised,
immutable, and what tests and the UI construct directly.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import NamedTuple, overload

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


def rank_key(line: LogLine | LineSource) -> RankKey:
    """The key lines are grouped by: the global rank, else the task, else the host's launcher."""
    if line.rank is not None:
        return line.rank
    if line.task_index is not None:
        return f"{line.role}{line.task_index}"
    if line.local_rank is not None:
        return f"local{line.local_rank}@{line.host}"
    return f"{line.role}@{line.host}"


class LineSource:
    """Everything a line carries except its text and receive time; one per file (or per
    launcher prefix), shared by all the lines that come from it."""

    __slots__ = ("host", "job_id", "key", "local_rank", "rank", "role", "stream", "task_index")

    def __init__(
        self,
        job_id: str,
        host: str,
        rank: int | None,
        local_rank: int | None,
        stream: str,
        role: str = "rank",
        task_index: int | None = None,
    ) -> None:
        self.job_id = job_id
        self.host = host
        self.rank = rank
        self.local_rank = local_rank
        self.stream = stream
        self.role = role
        self.task_index = task_index
        self.key: RankKey = rank_key(self)

    @classmethod
    def of(cls, line: LogLine) -> LineSource:
        return cls(
            line.job_id, line.host, line.rank, line.local_rank, line.stream, line.role,
            line.task_index,
        )  # fmt: skip

    def attrs(self) -> tuple[str, str, int | None, int | None, str, str, int | None]:
        return (
            self.job_id, self.host, self.rank, self.local_rank, self.stream, self.role,
            self.task_index,
        )  # fmt: skip

    def line(self, text: str, received: float) -> LogLine:
        return LogLine(
            self.job_id, self.host, self.rank, self.local_rank, self.stream, text, received,
            self.role, self.task_index,
        )  # fmt: skip

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LineSource) and self.attrs() == other.attrs()

    def __hash__(self) -> int:
        return hash(self.attrs())

    def __repr__(self) -> str:
        return f"LineSource{self.attrs()!r}"


class LineRun(NamedTuple):
    """``nlines`` consecutive lines of one source, joined by ``"\\n"`` (no trailing one).

    ``nlines`` is explicit because ``""`` may be one empty line; a line never contains
    ``"\\n"`` (runs built from lines that do keep them in ``parts``)."""

    source: LineSource
    received: float
    text: str
    nlines: int
    parts: tuple[str, ...] | None = None  # the lines, when one of them holds a "\n"

    def texts(self) -> list[str]:
        return list(self.parts) if self.parts is not None else self.text.split("\n")

    def lines(self) -> list[LogLine]:
        s = self.source
        head = (s.job_id, s.host, s.rank, s.local_rank, s.stream)
        tail = (self.received, s.role, s.task_index)
        new = tuple.__new__
        return [new(LogLine, (*head, t, *tail)) for t in self.texts()]


def run_of_texts(source: LineSource, received: float, texts: Sequence[str]) -> LineRun:
    text = "\n".join(texts)
    parts = tuple(texts) if text.count("\n") != len(texts) - 1 else None
    return LineRun(source, received, text, len(texts), parts)


def runs_of_text(source: LineSource, received: float, text: str) -> list[LineRun]:
    """The run of a decoded chunk: whole lines ending in ``\\n``, or one piece of a long
    line (no line end). ``\\r`` (progress bars) ends a line too."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if text.endswith("\n"):
        text = text[:-1]
        count = text.count("\n") + 1
    elif text:
        count = text.count("\n") + 1
    else:
        return []
    return [LineRun(source, received, text, count)]


class LineRuns(Sequence[LogLine]):
    """Lines as runs: a ``Sequence[LogLine]`` whose items are built when asked for."""

    __slots__ = ("_starts", "runs")

    def __init__(self, runs: Iterable[LineRun] = ()) -> None:
        self.runs: tuple[LineRun, ...] = tuple(r for r in runs if r.nlines)
        self._starts: list[int] | None = None

    @classmethod
    def concat(cls, parts: Iterable[Sequence[LogLine]]) -> LineRuns:
        out: list[LineRun] = []
        for part in parts:
            out.extend(as_runs(part))
        return cls(out)

    def __len__(self) -> int:
        return self.starts[-1]

    @property
    def starts(self) -> list[int]:
        if self._starts is None:
            self._starts = [0, *accumulate(r.nlines for r in self.runs)]
        return self._starts

    def __iter__(self) -> Iterator[LogLine]:
        for run in self.runs:
            yield from run.lines()

    @overload
    def __getitem__(self, index: int) -> LogLine: ...
    @overload
    def __getitem__(self, index: slice) -> list[LogLine]: ...
    def __getitem__(self, index: int | slice) -> LogLine | list[LogLine]:
        n = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            return self.between(start, stop)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("line index out of range")
        i = bisect_right(self.starts, index) - 1
        run = self.runs[i]
        return run.source.line(run.texts()[index - self.starts[i]], run.received)

    def between(self, start: int, stop: int) -> list[LogLine]:
        """Lines ``start..stop`` built from the runs that hold them only."""
        out: list[LogLine] = []
        starts = self.starts
        i = max(0, bisect_right(starts, start) - 1)
        while i < len(self.runs) and starts[i] < stop:
            # Only the lines asked for are built (the view takes a burst's newest few).
            run = self.runs[i]
            s = run.source
            head = (s.job_id, s.host, s.rank, s.local_rank, s.stream)
            tail = (run.received, s.role, s.task_index)
            new = tuple.__new__
            texts = run.texts()[max(0, start - starts[i]) : stop - starts[i]]
            out.extend(new(LogLine, (*head, t, *tail)) for t in texts)
            i += 1
        return out

    def __repr__(self) -> str:
        return f"LineRuns({len(self.runs)} runs, {len(self)} lines)"


def as_runs(lines: Sequence[LogLine]) -> Sequence[LineRun]:
    """The runs of ``lines``: free for :class:`LineRuns`, else consecutive lines with the
    same source and receive time grouped (one comparison per line)."""
    if isinstance(lines, LineRuns):
        return lines.runs
    out: list[LineRun] = []
    group: list[str] = []
    head: tuple[object, ...] | None = None
    first: LogLine | None = None
    for line in lines:
        key = (line[:5], line[6:])
        if key != head:
            if first is not None:
                out.append(run_of_texts(LineSource.of(first), first.received, group))
            head, first, group = key, line, []
        group.append(line.text)
    if first is not None:
        out.append(run_of_texts(LineSource.of(first), first.received, group))
    return out


def runs(lines: Sequence[LogLine]) -> list[tuple[RankKey, Sequence[LogLine]]]:
    """Consecutive lines of the same rank, as (key, lines) slices."""
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
    """Lines that arrived together from one host (possibly from several files).

    ``lines`` is a tuple of :class:`LogLine` or, from the follower, :class:`LineRuns`."""

    host: str
    lines: Sequence[LogLine]
    notes: tuple[FollowNote, ...] = ()
    received: float = 0.0
    finished: bool = field(default=False)  # the follower reached the end and exited
