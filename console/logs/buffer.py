"""Bounded in-memory buffers per rank, with search, filter-with-context and first error.

Memory stays bounded: the last ``max_lines_per_rank`` lines of every rank (everything
else stays on the hosts' disks). A rank's buffer is a deque of chunks
(``logs/chunks.py``: one per run of lines that arrived together, small runs merged).
Lines are numbered on arrival (a chunk holds a range of numbers) so that "all ranks
interleaved" is a merge of the per-rank chunk deques by that number; :class:`LogLine`
objects are built only for the lines that are asked for (the view's tail, a window
around a position, filter results). Readers that want the newest part (``tail``,
``filtered`` with a limit) walk the chunks newest-first and stop when they have it.
"""

from __future__ import annotations

import heapq
import re
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate

from console.jobs.ssh.failure_lines import ERROR_HINTS, ERROR_PATTERN
from console.logs.chunks import (
    MERGE_CHARS,
    Chunk,
    between,
    plain_chunks,
    plain_chunks_newest,
    starts_of,
)
from console.logs.filtering import (
    Gap,
    Shown,
    compile_search,
    filter_with_context,
    line_prefilter,
    with_context,
)
from console.logs.models import LineRun, LogLine, RankKey, as_runs

__all__ = [
    "DEFAULT_MAX_LINES_PER_RANK",
    "MERGE_CHARS",
    "Entry",
    "Gap",
    "LogStore",
    "Shown",
    "compile_search",
    "filter_with_context",
    "line_prefilter",
]

DEFAULT_MAX_LINES_PER_RANK = 100_000

Entry = tuple[int, LogLine]  # (arrival number, line)


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
        self._ranks: dict[RankKey, deque[Chunk]] = {}
        self._kept: dict[RankKey, int] = {}
        self._dropped: dict[RankKey, int] = {}
        self._seq = 0
        self.first_error: LogLine | None = None
        self._first_error_seq: int | None = None

    def __len__(self) -> int:
        return sum(self._kept.values())

    @property
    def total_received(self) -> int:
        return self._seq

    def text_bytes(self) -> int:
        """Characters of text held (for memory figures), evicted-but-held ones included."""
        return sum(len(c.text) for d in self._ranks.values() for c in d)

    def chunk_count(self) -> int:
        """Chunks held (for memory figures: each costs ~150 bytes besides its text)."""
        return sum(len(d) for d in self._ranks.values())

    def add(self, lines: Sequence[LogLine]) -> None:
        runs = as_runs(lines)
        if not runs:
            return
        limit = self.max_lines_per_rank
        ranks, kept = self._ranks, self._kept
        seq = self._seq
        for run in runs:
            if self.first_error is None:
                self._find_first_error(run, seq)
            key = run.source.key
            buf = ranks.get(key)
            if buf is None:
                buf = ranks[key] = deque()
                kept[key] = 0
                self._dropped[key] = 0
            if buf and buf[-1].can_take(run):
                buf[-1].take(seq, run)
            else:
                buf.append(Chunk(seq, run))
            seq += run.nlines
            total = kept[key] + run.nlines
            if total > limit:
                self._evict(key, buf, total - limit)
                total = limit
            kept[key] = total
        self._seq = seq

    def _evict(self, key: RankKey, buf: deque[Chunk], over: int) -> None:
        self._dropped[key] += over
        while over:
            first = buf[0]
            if first.kept <= over:
                over -= first.kept
                buf.popleft()
            else:
                first.skip += over
                over = 0

    def _find_first_error(self, run: LineRun, first_seq: int) -> None:
        text = run.text
        if self.error_pattern is ERROR_PATTERN:
            low = text.lower()
            if not any(hint in low for hint in ERROR_HINTS):
                return
        if not self.error_pattern.search(text):
            return
        for offset, line in enumerate(run.lines()):
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

    # -- reading -------------------------------------------------------------------------

    def _keys(self, ranks: Iterable[RankKey] | None) -> list[RankKey]:
        return list(self._ranks) if ranks is None else [k for k in ranks if k in self._ranks]

    def chunks(self, ranks: Iterable[RankKey] | None = None) -> list[Chunk]:
        """The chosen ranks' chunks in arrival order (one entry per run, not per line)."""
        keys = self._keys(ranks)
        if len(keys) == 1:
            return list(plain_chunks(self._ranks[keys[0]]))
        return list(heapq.merge(*(plain_chunks(self._ranks[k]) for k in keys)))

    def count(self, ranks: Iterable[RankKey] | None = None) -> int:
        return sum(self._kept[k] for k in self._keys(ranks))

    def entries(self, ranks: Iterable[RankKey] | None = None) -> Iterator[Entry]:
        """(number, line) of the chosen ranks (all when None), in arrival order."""
        for chunk in self.chunks(ranks):
            yield from enumerate(chunk.lines(), chunk.first)

    def lines(self, ranks: Iterable[RankKey] | None = None) -> list[LogLine]:
        out: list[LogLine] = []
        for chunk in self.chunks(ranks):
            out.extend(chunk.lines())
        return out

    def tail(self, n: int, ranks: Iterable[RankKey] | None = None) -> list[LogLine]:
        """The last ``n`` lines of the chosen ranks, building only those."""
        keys = self._keys(ranks)
        newest = heapq.merge(*(plain_chunks_newest(self._ranks[k]) for k in keys), reverse=True)
        picked: list[Chunk] = []
        have = 0
        for chunk in newest:
            if have >= n:
                break
            picked.append(chunk)
            have += chunk.kept
        out: list[LogLine] = []
        for chunk in reversed(picked):
            out.extend(chunk.lines())
        return out[-n:] if n else []

    def window(
        self, seq: int, before: int, after: int, ranks: Iterable[RankKey] | None = None
    ) -> tuple[list[LogLine], int | None, int]:
        """The chosen ranks' lines from ``before`` lines ahead of line number ``seq`` to
        ``after`` lines from it; the index of ``seq`` in them (None when it is not kept
        or not of these ranks); and how many of their lines come before the window."""
        chunks = self.chunks(ranks)
        starts = starts_of(chunks)
        i = bisect_right([c.first for c in chunks], seq) - 1
        if i >= 0 and seq < chunks[i].seq + chunks[i].count:
            position: int | None = starts[i] + seq - chunks[i].first
            at = position
        else:
            position = None
            at = starts[i + 1]
        lo = max(0, (at or 0) - before)
        hi = min(starts[-1], (at or 0) + after)
        lines = between(chunks, starts, lo, hi)
        return lines, (None if position is None else position - lo), lo

    def search(
        self, pattern: str | re.Pattern[str], ranks: Iterable[RankKey] | None = None
    ) -> list[int]:
        """Positions (in ``lines(ranks)``) of the lines that match, case-insensitive."""
        regex = compile_search(pattern) if isinstance(pattern, str) else pattern
        hits: list[int] = []
        position = 0
        prefilter = line_prefilter(regex)
        for chunk in self.chunks(ranks):
            if prefilter is None or prefilter.search(chunk.text):
                hits += [position + i for i, t in enumerate(chunk.texts()) if regex.search(t)]
            position += chunk.kept
        return hits

    def filtered(
        self,
        pattern: str | re.Pattern[str],
        context: int = 0,
        ranks: Iterable[RankKey] | None = None,
        limit: int | None = None,
    ) -> list[Shown | Gap]:
        """Matching lines with context and gaps; with ``limit``, only the newest part of
        about ``limit`` items. Chunks are walked from the newest back and only until
        enough matches (and the context before the oldest) are found: a chunk with no
        match costs one regex scan of its text, lines are built only for what is shown."""
        if context < 0:
            raise ValueError(f"context must be >= 0, got {context}")
        regex = compile_search(pattern) if isinstance(pattern, str) else pattern
        keys = self._keys(ranks)
        total = self.count(keys)
        newest = heapq.merge(*(plain_chunks_newest(self._ranks[k]) for k in keys), reverse=True)
        prefilter = line_prefilter(regex)
        picked: list[Chunk] = []  # newest first
        found: list[list[int]] = []  # hit positions per chunk with hits, newest first
        nhits = 0
        end = total  # position just after the current chunk's last line
        for chunk in newest:
            start = end - chunk.kept
            # Enough matches: stop at the first older chunk outside the oldest one's context
            # (a chunk inside it is scanned too: a match there shows as one, with context).
            if (
                limit is not None
                and nhits * (1 + 2 * context) >= limit
                and (not found or end <= found[-1][0] - context)
            ):
                break
            if prefilter is None or prefilter.search(chunk.text):
                hits = [start + j for j, t in enumerate(chunk.texts()) if regex.search(t)]
                if hits:
                    found.append(hits)
                    nhits += len(hits)
            picked.append(chunk)
            end = start
        picked.reverse()
        starts = list(accumulate((c.kept for c in picked), initial=end))
        texts: dict[int, list[str]] = {}

        def line_at(pos: int) -> LogLine:
            # A firehose's chunk holds thousands of lines: build only the ones shown.
            i = bisect_right(starts, pos) - 1
            if i not in texts:
                texts[i] = picked[i].texts()
            return picked[i].line(texts[i][pos - starts[i]])

        return with_context([h for hits in reversed(found) for h in hits], total, context, line_at)
