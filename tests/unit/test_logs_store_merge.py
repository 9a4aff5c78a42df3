"""LogStore merges small runs into a rank's last chunk (memory: a chunk per one-line run
cost ~250 bytes a line); every reading must answer exactly as a store of plain lines.

The reference is a list of (arrival number, LogLine) per rank with the same eviction;
runs of random sizes (one-line runs, runs around MERGE_CHARS, runs with embedded
newlines, a LogLine list) go to random ranks with a distinct receive time each.
"""

from __future__ import annotations

import random
import re

import pytest

from console.logs import buffer
from console.logs.buffer import Gap, LogStore, Shown, filter_with_context
from console.logs.models import LineRun, LineRuns, LineSource, LogLine, rank_key


class Reference:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seq = 0
        self.ranks: dict[object, list[tuple[int, LogLine]]] = {}
        self.dropped: dict[object, int] = {}

    def add(self, lines: list[LogLine]) -> None:
        for line in lines:
            kept = self.ranks.setdefault(rank_key(line), [])
            kept.append((self.seq, line))
            self.seq += 1
            over = max(0, len(kept) - self.limit)
            self.dropped[rank_key(line)] = self.dropped.get(rank_key(line), 0) + over
            del kept[:over]

    def entries(self, ranks: list[object] | None = None) -> list[tuple[int, LogLine]]:
        keys = list(self.ranks) if ranks is None else [k for k in ranks if k in self.ranks]
        return sorted(e for k in keys for e in self.ranks[k])


def _source(rank: int) -> LineSource:
    return LineSource("job", "h0", rank, rank, "stdout")


def _random_batch(rng: random.Random, sources: list[LineSource], step: list[int]) -> LineRuns:
    runs = []
    for _ in range(rng.randint(1, 4)):
        source = rng.choice(sources)
        kind = rng.random()
        if kind < 0.6:
            n = rng.randint(1, 3)  # the slow log: merged
        elif kind < 0.9:
            n = rng.randint(20, 120)  # around MERGE_CHARS (lines of ~30-40 characters)
        else:
            n = rng.randint(121, 300)  # never merged
        texts = []
        for _ in range(n):
            step[0] += 1
            word = rng.choice(["loss", "ERROR boom", "step", "Traceback", ""])
            texts.append(f"rank {source.rank} line {step[0]} {word}")
        received = 1000.0 + step[0] / 7
        if rng.random() < 0.05:
            texts[0] += "\nembedded"  # a line holding a newline: kept as parts, never merged
            run = LineRun(source, received, "\n".join(texts), n, tuple(texts))
        else:
            run = LineRun(source, received, "\n".join(texts), n)
        runs.append(run)
    return LineRuns(runs)


@pytest.mark.parametrize("seed", range(12))
def test_merged_store_reads_like_plain_lines(seed: int) -> None:
    rng = random.Random(seed)
    limit = rng.choice([5, 40, 150, 1000])
    store, ref = LogStore(limit), Reference(limit)
    sources = [_source(r) for r in range(rng.randint(1, 4))]
    step = [0]
    for round_ in range(60):
        batch = _random_batch(rng, sources, step)
        plain = list(batch)
        # Sometimes plain LogLines (the CLI, tests): sources made anew, equal not identical.
        store.add(plain if rng.random() < 0.2 else batch)
        ref.add(plain)
        if round_ % 7:
            continue
        ranks = None if rng.random() < 0.5 else rng.sample(list(ref.ranks), 1)
        entries = ref.entries(ranks)
        lines = [line for _, line in entries]
        assert list(store.entries(ranks)) == entries
        assert store.lines(ranks) == lines
        assert store.count(ranks) == len(lines)
        n = rng.randint(0, len(lines) + 2)
        assert store.tail(n, ranks) == (lines[-n:] if n else [])
        if entries:
            at = rng.randrange(len(entries))
            got, index, lo = store.window(entries[at][0], 3, 5, ranks)
            start = max(0, at - 3)
            assert (got, index, lo) == (lines[start : at + 5], at - start, start)
        pattern = re.compile(rng.choice(["error", "^rank 0", "line 1", "trace|embedded$"]), re.I)
        assert store.search(pattern, ranks) == [
            i for i, line in enumerate(lines) if pattern.search(line.text)
        ]
        want = filter_with_context(lines, pattern, 1)
        assert store.filtered(pattern, 1, ranks) == want
        # With a limit: the newest matches (at least limit / (1 + 2 * context) of them,
        # or all) with their context, as in the whole result; a gap counts what is before.
        limit = rng.randint(0, 12)
        got = store.filtered(pattern, 1, ranks, limit)
        body = got[1:] if got and isinstance(got[0], Gap) else got
        assert want[len(want) - len(body) :] == body
        hits = [i for i, line in enumerate(lines) if pattern.search(line.text)]
        assert sum(isinstance(x, Shown) and x.match for x in got) >= min(len(hits), -(-limit // 3))
        if got:
            covered = sum(x.skipped if isinstance(x, Gap) else 1 for x in got)
            assert covered == len(lines)
    assert len(store) == sum(len(v) for v in ref.ranks.values())
    assert store.total_received == ref.seq
    assert store.ranks() == sorted(ref.ranks)
    for key in ref.ranks:
        assert store.dropped(key) == ref.dropped[key]


def test_small_runs_share_chunks() -> None:
    store = LogStore(1000)
    source = _source(0)
    for i in range(500):
        store.add(LineRuns([LineRun(source, float(i), f"line {i}", 1)]))
    chunks = store._ranks[0]
    assert len(chunks) < 500 // 10  # ~4 KiB of text a chunk
    assert all(len(c.text) < 2 * buffer.MERGE_CHARS for c in chunks)
    # Each line keeps its own receive time and number.
    assert [(n, line.text, line.received) for n, line in store.entries()] == [
        (i, f"line {i}", float(i)) for i in range(500)
    ]


def test_interleaving_of_ranks_is_kept() -> None:
    """Merging must not group a rank's lines ahead of lines of another rank that arrived
    between them: 'all ranks' shows arrival order."""
    store = LogStore(100)
    a, b = _source(0), _source(1)
    for i in range(6):
        store.add(LineRuns([LineRun(a if i % 2 == 0 else b, float(i), f"l{i}", 1)]))
    assert [line.text for line in store.lines()] == [f"l{i}" for i in range(6)]
    assert [line.text for line in store.lines([1])] == ["l1", "l3", "l5"]


def test_eviction_inside_a_merged_chunk() -> None:
    store = LogStore(3)
    source = _source(0)
    for i in range(5):
        store.add(LineRuns([LineRun(source, float(i), f"a{i}\nb{i}", 2)]))
    assert [line.text for line in store.lines()] == ["b3", "a4", "b4"]
    assert store.dropped(0) == 7
    assert [n for n, _ in store.entries()] == [7, 8, 9]


def test_filtered_with_limit_reads_only_the_newest_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The filter view (``m``) asks for the newest ``limit`` items: older chunks are
    neither split back into their runs nor scanned (it listed every chunk of the store)."""
    store = LogStore(100_000)
    source = _source(0)
    for i in range(20_000):
        text = f"line {i}" + (" error" if i % 10 == 5 else "")
        store.add(LineRuns([LineRun(source, float(i), text, 1)]))
    assert store.chunk_count() > 50  # merged chunks, each split by pieces() on reading
    split: list[int] = []
    real_pieces = buffer.Chunk.pieces

    def pieces(chunk: buffer.Chunk) -> list[buffer.Chunk]:
        split.append(chunk.seq)
        return real_pieces(chunk)

    monkeypatch.setattr(buffer.Chunk, "pieces", pieces)
    got = store.filtered("error", 2, None, 50)
    monkeypatch.undo()
    assert len(split) <= 3  # listing every chunk split all of them
    want = filter_with_context(store.lines(), "error", 2)
    assert isinstance(got[0], Gap)
    assert got[1:] == want[len(want) - len(got) + 1 :]
    assert got[-4] == Shown(LogLine("job", "h0", 0, 0, "stdout", "line 19995 error", 19995.0), True)
