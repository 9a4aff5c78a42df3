"""A rank's stored lines as chunks: one per run of lines that arrived together, its
text joined by ``"\\n"`` with one shared source (about one byte per character plus one
per line, instead of a tuple, a string and an int per line).

A log written slowly (or followed closely) arrives a line or two per run, and a chunk
object per run cost ~250 bytes a line. So a small run is appended to its rank's last
chunk while that chunk is small (``MERGE_CHARS``); the chunk keeps a flat table of its
*segments* (first line, first character, arrival number, receive time: 32 bytes each),
and reading turns it back into one plain chunk per segment (:func:`pieces`), so
numbering, the interleaving of ranks and every line's receive time are exactly as
without merging.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate

from console.logs.models import LineRun, LineSource, LogLine

# A run is appended to its rank's last chunk while that chunk's text is shorter than this
# (and the run too): bounds the copy an append makes and the work of splitting on reads.
MERGE_CHARS = 4096


class Chunk:
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

    def pieces(self) -> list[Chunk]:
        """This chunk as plain chunks, one per segment still holding kept lines."""
        segs = self.segs
        if segs is None:
            return [self]
        out: list[Chunk] = []
        n = len(segs) // 4
        for j in range(n):
            line, char, seq, received = segs[4 * j : 4 * j + 4]
            end_line = segs[4 * j + 4] if j + 1 < n else self.count
            if end_line <= self.skip:
                continue
            end_char = int(segs[4 * j + 5]) - 1 if j + 1 < n else len(self.text)
            piece = Chunk.__new__(Chunk)
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

    def __lt__(self, other: Chunk) -> bool:
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

    def line(self, text: str) -> LogLine:
        """A line of this chunk with ``text`` (one of :meth:`texts`)."""
        s = self.source
        return LogLine(s.job_id, s.host, s.rank, s.local_rank, s.stream, text,
                       self.received, s.role, s.task_index)  # fmt: skip


def plain_chunks(buf: Iterable[Chunk]) -> Iterator[Chunk]:
    """A rank's chunks, merged ones split back into their runs, oldest first."""
    for chunk in buf:
        if chunk.segs is None:
            yield chunk
        else:
            yield from chunk.pieces()


def plain_chunks_newest(buf: deque[Chunk]) -> Iterator[Chunk]:
    for chunk in reversed(buf):
        if chunk.segs is None:
            yield chunk
        else:
            yield from reversed(chunk.pieces())


def starts_of(chunks: Sequence[Chunk]) -> list[int]:
    """Position of each chunk's first kept line among the chunks' lines, and the total."""
    return [0, *accumulate(c.kept for c in chunks)]


def between(chunks: Sequence[Chunk], starts: list[int], lo: int, hi: int) -> list[LogLine]:
    out: list[LogLine] = []
    i = max(0, bisect_right(starts, lo) - 1)
    while i < len(chunks) and starts[i] < hi:
        out.extend(chunks[i].lines()[max(0, lo - starts[i]) : hi - starts[i]])
        i += 1
    return out
