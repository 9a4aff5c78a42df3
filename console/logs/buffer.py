"""Bounded in-memory buffers per rank, with search, filter-with-context and first error.

Memory stays bounded: the last ``max_lines_per_rank`` lines of every rank (everything
else stays on the hosts' disks). Lines are numbered on arrival so that "all ranks
interleaved" is a merge of the per-rank buffers by that number.
"""

from __future__ import annotations

import heapq
import re
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from console.logs.models import LogLine, RankKey, runs

DEFAULT_MAX_LINES_PER_RANK = 100_000

# Lines that start a failure report; the first one across all ranks is where to look.
ERROR_PATTERN = re.compile(
    r"Traceback \(most recent call last\)|Error\b|NCCL error|exited with|"
    r"\bexitcode\b|Segmentation fault|\bFATAL\b|\bKilled\b|CUDA out of memory",
)
# Lowercase words one of which every ERROR_PATTERN match contains: a substring test on
# the batch is far cheaper than the regex when there is no error (the usual case).
ERROR_HINTS = ("traceback", "error", "exited with", "exitcode", "fault", "fatal", "killed")

Entry = tuple[int, LogLine]  # (arrival number, line)


@dataclass(frozen=True, slots=True)
class Gap:
    """Lines left out between two shown parts of a filtered view."""

    skipped: int


@dataclass(frozen=True, slots=True)
class Shown:
    line: LogLine
    match: bool  # True: it matched; False: shown as context


def compile_search(pattern: str) -> re.Pattern[str]:
    """A case-insensitive regex; raises ValueError naming what is wrong with it."""
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc


class LogStore:
    """The last N lines per rank; counts what fell out; remembers the first error."""

    def __init__(
        self,
        max_lines_per_rank: int = DEFAULT_MAX_LINES_PER_RANK,
        error_pattern: re.Pattern[str] = ERROR_PATTERN,
    ) -> None:
        if max_lines_per_rank < 1:
            raise ValueError(f"max_lines_per_rank must be >= 1, got {max_lines_per_rank}")
        self.max_lines_per_rank = max_lines_per_rank
        self.error_pattern = error_pattern
        self._ranks: dict[RankKey, deque[Entry]] = {}
        self._dropped: dict[RankKey, int] = {}
        self._seq = 0
        self.first_error: LogLine | None = None
        self._first_error_seq: int | None = None

    def __len__(self) -> int:
        return sum(len(d) for d in self._ranks.values())

    @property
    def total_received(self) -> int:
        return self._seq

    def add(self, lines: Sequence[LogLine]) -> None:
        if not lines:
            return
        seq = self._seq
        if self.first_error is None:
            self._find_first_error(lines, seq)
        limit = self.max_lines_per_rank
        ranks = self._ranks
        for key, run in runs(lines):
            buf = ranks.get(key)
            if buf is None:
                buf = ranks[key] = deque(maxlen=limit)
                self._dropped[key] = 0
            over = len(buf) + len(run) - limit
            if over > 0:
                self._dropped[key] += over
            buf.extend(zip(range(seq, seq + len(run)), run, strict=True))
            seq += len(run)
        self._seq = seq

    def _find_first_error(self, lines: Sequence[LogLine], first_seq: int) -> None:
        # One pass over the batch; only a hit costs a per-line scan.
        joined = "\n".join([line.text for line in lines])
        if self.error_pattern is ERROR_PATTERN:
            low = joined.lower()
            if not any(hint in low for hint in ERROR_HINTS):
                return
        if not self.error_pattern.search(joined):
            return
        for offset, line in enumerate(lines):
            if self.error_pattern.search(line.text):
                self.first_error = line
                self._first_error_seq = first_seq + offset
                return

    @property
    def first_error_seq(self) -> int | None:
        return self._first_error_seq

    def ranks(self) -> list[RankKey]:
        ints = sorted(k for k in self._ranks if isinstance(k, int))
        names = sorted(k for k in self._ranks if isinstance(k, str))
        return [*ints, *names]

    def dropped(self, key: RankKey) -> int:
        return self._dropped.get(key, 0)

    def entries(self, ranks: Iterable[RankKey] | None = None) -> Iterator[Entry]:
        """(number, line) of the chosen ranks (all when None), in arrival order."""
        keys = list(self._ranks) if ranks is None else [k for k in ranks if k in self._ranks]
        if len(keys) == 1:
            return iter(self._ranks[keys[0]])
        return heapq.merge(*(self._ranks[k] for k in keys))

    def lines(self, ranks: Iterable[RankKey] | None = None) -> list[LogLine]:
        return [line for _seq, line in self.entries(ranks)]

    def search(
        self, pattern: str | re.Pattern[str], ranks: Iterable[RankKey] | None = None
    ) -> list[int]:
        """Positions (in ``lines(ranks)``) of the lines that match, case-insensitive."""
        regex = compile_search(pattern) if isinstance(pattern, str) else pattern
        return [i for i, line in enumerate(self.lines(ranks)) if regex.search(line.text)]

    def filtered(
        self,
        pattern: str | re.Pattern[str],
        context: int = 0,
        ranks: Iterable[RankKey] | None = None,
    ) -> list[Shown | Gap]:
        return filter_with_context(self.lines(ranks), pattern, context)


def filter_with_context(
    lines: Sequence[LogLine], pattern: str | re.Pattern[str], context: int = 0
) -> list[Shown | Gap]:
    """Matching lines with ``context`` lines either side, a :class:`Gap` between parts."""
    if context < 0:
        raise ValueError(f"context must be >= 0, got {context}")
    regex = compile_search(pattern) if isinstance(pattern, str) else pattern
    hits = [i for i, line in enumerate(lines) if regex.search(line.text)]
    out: list[Shown | Gap] = []
    shown_until = -1  # last index already shown
    hit_set = set(hits)
    for i in hits:
        first = max(i - context, shown_until + 1)
        if first > shown_until + 1:
            out.append(Gap(first - shown_until - 1))
        for j in range(first, min(i + context, len(lines) - 1) + 1):
            out.append(Shown(lines[j], j in hit_set))
        shown_until = max(shown_until, min(i + context, len(lines) - 1))
    if out and shown_until < len(lines) - 1:
        out.append(Gap(len(lines) - 1 - shown_until))
    return out
