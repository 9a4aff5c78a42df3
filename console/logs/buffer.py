"""Bounded in-memory buffers per rank, with search, filter-with-context and first error.

Memory stays bounded: the last ``max_lines_per_rank`` lines of every rank (everything
else stays on the hosts' disks). A rank's buffer is a deque of *chunks*, one per run of
lines that arrived together, each holding the run's text joined by ``"\\n"`` and one
shared source: about one byte per character plus one per line, instead of a tuple,
a string and an int per line. Lines are numbered on arrival (a chunk holds a range of
numbers) so that "all ranks interleaved" is a merge of the per-rank chunk deques by
that number; :class:`LogLine` objects are built only for the lines that are asked for
(the view's tail, a window around a position, filter results).

A log written slowly (or followed closely) arrives a line or two per run, and a chunk
object per run cost ~250 bytes a line. So a small run is appended to its rank's last
chunk while that chunk is small (``MERGE_CHARS``); the chunk keeps a flat table of its
*segments* (first line, first character, arrival number, receive time: 32 bytes each),
and reading turns it back into one plain chunk per segment, so numbering, the
interleaving of ranks and every line's receive time are exactly as without merging.
"""

from __future__ import annotations

import heapq
import re
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate

from console.jobs.failure_lines import ERROR_HINTS, ERROR_PATTERN
from console.logs.models import LineRun, LineSource, LogLine, RankKey, as_runs

DEFAULT_MAX_LINES_PER_RANK = 100_000
# A run is appended to its rank's last chunk while that chunk's text is shorter than this
# (and the run too): bounds the copy an append makes and the work of splitting on reads.
MERGE_CHARS = 4096


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


class _Chunk:
    """Lines ``seq + skip .. seq + count - 1`` of one run (the first ``skip`` were
    evicted; the text keeps them until the whole chunk goes: at most one partly evicted
    chunk per rank). A merged chunk (``segs`` not None) holds several runs; only
    :meth:`pieces` knows it: every reader gets plain chunks."""

    __slots__ = ("count", "parts", "received", "segs", "seq", "skip", "source", "text")

    def __init__(self, seq: int, run: LineRun) -> None:
        self.seq = seq
        self.source: LineSource = run.source
        self.received = run.received
        self.text = run.text
        self.count = run.nlines
        self.parts = run.parts
        self.skip = 0
        # Per merged segment: first line, first character, arrival number, receive time.
        self.segs: array[float] | None = None

    def can_take(self, run: LineRun) -> bool:
        return (
            len(self.text) < MERGE_CHARS
            and len(run.text) < MERGE_CHARS
            and self.parts is None
            and run.parts is None
            and (run.source is self.source or run.source == self.source)
        )

    def take(self, seq: int, run: LineRun) -> None:
        """Append ``run`` (numbered from ``seq``) as a new segment."""
        if self.segs is None:
            self.segs = array("d", (0, 0, self.seq, self.received))
        self.segs.extend((self.count, len(self.text) + 1, seq, run.received))
        self.text = f"{self.text}\n{run.text}"
        self.count += run.nlines

    def pieces(self) -> list[_Chunk]:
        """This chunk as plain chunks, one per segment still holding kept lines."""
        segs = self.segs
        if segs is None:
            return [self]
        out: list[_Chunk] = []
        n = len(segs) // 4
        for j in range(n):
            line, char, seq, received = segs[4 * j : 4 * j + 4]
            end_line = segs[4 * j + 4] if j + 1 < n else self.count
            if end_line <= self.skip:
                continue
            end_char = int(segs[4 * j + 5]) - 1 if j + 1 < n else len(self.text)
            piece = _Chunk.__new__(_Chunk)
            piece.seq, piece.source, piece.received = int(seq), self.source, received
            piece.text, piece.parts = self.text[int(char) : end_char], None
            piece.count = int(end_line - line)
            piece.skip = max(0, self.skip - int(line))
            piece.segs = None
            out.append(piece)
        return out

    @property
    def first(self) -> int:
        return self.seq + self.skip

    @property
    def kept(self) -> int:
        return self.count - self.skip

    def __lt__(self, other: _Chunk) -> bool:
        return self.seq < other.seq

    def texts(self) -> list[str]:
        texts = list(self.parts) if self.parts is not None else self.text.split("\n")
        return texts[self.skip :] if self.skip else texts

    def lines(self) -> list[LogLine]:
        s = self.source
        head = (s.job_id, s.host, s.rank, s.local_rank, s.stream)
        tail = (self.received, s.role, s.task_index)
        new = tuple.__new__
        return [new(LogLine, (*head, t, *tail)) for t in self.texts()]


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
        self._ranks: dict[RankKey, deque[_Chunk]] = {}
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
                buf.append(_Chunk(seq, run))
            seq += run.nlines
            total = kept[key] + run.nlines
            if total > limit:
                self._evict(key, buf, total - limit)
                total = limit
            kept[key] = total
        self._seq = seq

    def _evict(self, key: RankKey, buf: deque[_Chunk], over: int) -> None:
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

    def chunks(self, ranks: Iterable[RankKey] | None = None) -> list[_Chunk]:
        """The chosen ranks' chunks in arrival order (one entry per run, not per line)."""
        keys = self._keys(ranks)
        if len(keys) == 1:
            return list(_pieces(self._ranks[keys[0]]))
        return list(heapq.merge(*(_pieces(self._ranks[k]) for k in keys)))

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
        newest = heapq.merge(*(_pieces_newest(self._ranks[k]) for k in keys), reverse=True)
        picked: list[_Chunk] = []
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
        starts = _starts(chunks)
        i = bisect_right([c.first for c in chunks], seq) - 1
        if i >= 0 and seq < chunks[i].seq + chunks[i].count:
            position: int | None = starts[i] + seq - chunks[i].first
            at = position
        else:
            position = None
            at = starts[i + 1]
        lo = max(0, (at or 0) - before)
        hi = min(starts[-1], (at or 0) + after)
        lines = _between(chunks, starts, lo, hi)
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
        about ``limit`` items, found by scanning chunks from the newest back (a chunk
        with no match costs one regex scan of its text)."""
        if context < 0:
            raise ValueError(f"context must be >= 0, got {context}")
        regex = compile_search(pattern) if isinstance(pattern, str) else pattern
        chunks = self.chunks(ranks)
        starts = _starts(chunks)
        total = starts[-1]
        prefilter = line_prefilter(regex)
        hits: list[int] = []
        for i in range(len(chunks) - 1, -1, -1):
            if limit is not None and len(hits) * (1 + 2 * context) >= limit:
                break
            chunk = chunks[i]
            if prefilter is None or prefilter.search(chunk.text):
                found = [starts[i] + j for j, t in enumerate(chunk.texts()) if regex.search(t)]
                hits[:0] = found
        cache: dict[int, list[LogLine]] = {}

        def line_at(pos: int) -> LogLine:
            i = bisect_right(starts, pos) - 1
            if i not in cache:
                cache[i] = chunks[i].lines()
            return cache[i][pos - starts[i]]

        return _with_context(hits, total, context, line_at)


def _pieces(buf: Iterable[_Chunk]) -> Iterator[_Chunk]:
    """A rank's chunks, merged ones split back into their runs, oldest first."""
    for chunk in buf:
        if chunk.segs is None:
            yield chunk
        else:
            yield from chunk.pieces()


def _pieces_newest(buf: deque[_Chunk]) -> Iterator[_Chunk]:
    for chunk in reversed(buf):
        if chunk.segs is None:
            yield chunk
        else:
            yield from reversed(chunk.pieces())


def _starts(chunks: Sequence[_Chunk]) -> list[int]:
    """Position of each chunk's first kept line among the chunks' lines, and the total."""
    return [0, *accumulate(c.kept for c in chunks)]


def _between(chunks: Sequence[_Chunk], starts: list[int], lo: int, hi: int) -> list[LogLine]:
    out: list[LogLine] = []
    i = max(0, bisect_right(starts, lo) - 1)
    while i < len(chunks) and starts[i] < hi:
        out.extend(chunks[i].lines()[max(0, lo - starts[i]) : hi - starts[i]])
        i += 1
    return out


def line_prefilter(regex: re.Pattern[str]) -> re.Pattern[str] | None:
    """A regex that finds, in lines joined by "\\n", every place where ``regex`` matches
    one line (it may find more): ``^``/``$`` made per line. None when no such
    variant is safe (string anchors, dot-all): then every line is tried."""
    if regex.flags & re.DOTALL or any(a in regex.pattern for a in ("\\A", "\\Z", "(?s")):
        return None
    return re.compile(regex.pattern, regex.flags | re.MULTILINE)


def _with_context(
    hits: Sequence[int], total: int, context: int, line_at: Callable[[int], LogLine]
) -> list[Shown | Gap]:
    out: list[Shown | Gap] = []
    shown_until = -1  # last index already shown
    hit_set = set(hits)
    for i in hits:
        first = max(i - context, shown_until + 1)
        if first > shown_until + 1:
            out.append(Gap(first - shown_until - 1))
        for j in range(first, min(i + context, total - 1) + 1):
            out.append(Shown(line_at(j), j in hit_set))
        shown_until = max(shown_until, min(i + context, total - 1))
    if out and shown_until < total - 1:
        out.append(Gap(total - 1 - shown_until))
    return out


def filter_with_context(
    lines: Sequence[LogLine], pattern: str | re.Pattern[str], context: int = 0
) -> list[Shown | Gap]:
    """Matching lines with ``context`` lines either side, a :class:`Gap` between parts."""
    if context < 0:
        raise ValueError(f"context must be >= 0, got {context}")
    regex = compile_search(pattern) if isinstance(pattern, str) else pattern
    hits = [i for i, line in enumerate(lines) if regex.search(line.text)]
    return _with_context(hits, len(lines), context, lines.__getitem__)
