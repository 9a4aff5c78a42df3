"""A line longer than the follower's max_line, in a launcher's combined stream, keeps its
rank in every piece (issue 29 item 6: the continuation chunks of a 50 MB line read
``launcher``). The real follower program cuts the file; the console's attribution reads
its frames as HostLogFollower.decode does."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.logs.follower import MAX_LINE, FollowTarget, HostLogFollower, program_source
from console.logs.frames import Data, Note, read_frames
from console.logs.models import LineRuns, LogLine
from console.logs.prefixes import FileAttribution, guess_context

pytestmark = pytest.mark.timeout(120)

BIG = 50 * 1024 * 1024


def follow_to_end(path: Path) -> list[Data]:
    cfg = {"files": [{"p": str(path)}], "final": True, "max_line": MAX_LINE}
    proc = subprocess.run(
        [sys.executable, "-u", "-", json.dumps(cfg)],
        input=program_source().encode(),
        capture_output=True,
        timeout=90,
        check=True,
    )
    frames, _ = read_frames(proc.stdout, {})
    return [frame for frame in frames if isinstance(frame, Data)]


def attributed(path: Path, node_ranks: tuple[int, ...] = ()) -> list[LogLine]:
    attribution = FileAttribution(guess_context("job-1", "node0", str(path), node_ranks))
    lines: list[LogLine] = []
    for frame in follow_to_end(path):
        lines += LineRuns(attribution.runs(frame.data.decode("utf-8", "replace"), 1.0))
    return lines


@pytest.mark.parametrize(
    ("prefix", "rank", "size"),
    # The issue's 50 MB once; the other launchers' prefixes with a 1 MB line (31 pieces).
    [("[default1]:", 3, BIG), ("[1,5]<stdout>:", 5, 1 << 20), ("[rank2]: ", 2, 1 << 20)],
    ids=["torchrun-tee-50MB", "mpirun-tag-output", "torch-rank"],
)
def test_every_piece_of_a_long_line_keeps_its_rank(
    tmp_path: Path, prefix: str, rank: int, size: int
) -> None:
    path = tmp_path / "torchrun-0.out"  # node 0's launcher output: a combined stream
    # The long line's bytes include a '[' that looks like a prefix where a piece starts.
    body = (b"[default0]:" + b"y" * (MAX_LINE - 11)) + b"x" * (size - MAX_LINE)
    path.write_bytes(b"[default0]:before\n" + prefix.encode() + body + b"\n[default0]:after\n")
    started = time.monotonic()
    lines = attributed(path, node_ranks=(2, 3))
    print(f"{len(lines)} lines from a {size >> 20} MB line in {time.monotonic() - started:.1f} s")
    assert lines[0].text == "before" and lines[0].rank == 2
    assert lines[-1].text == "after" and lines[-1].rank == 2
    pieces = lines[1:-1]
    assert len(pieces) > size // MAX_LINE  # cut into pieces by the follower
    assert {(line.rank, line.role) for line in pieces} == {(rank, "rank")}
    # Nothing of the line was read as a prefix or lost.
    assert sum(len(line.text) for line in pieces) == len(body)


def test_a_line_left_open_by_a_finished_file_does_not_leak_into_another_file(
    tmp_path: Path,
) -> None:
    first = tmp_path / "torchrun-0.out"
    first.write_bytes(b"[default1]:" + b"z" * (3 * MAX_LINE) + b"\n[default0]:ok\n")
    other = tmp_path / "torchrun-1.out"
    other.write_bytes(b"plain launcher line\n")
    assert {line.rank for line in attributed(first, (0, 1))[:-1]} == {1}
    assert [(line.rank, line.role) for line in attributed(other)] == [(None, "launcher")]


def test_a_truncated_file_does_not_continue_the_line_it_left_open(tmp_path: Path) -> None:
    # The frames the follower sends: a piece of a long line (no line end), the file
    # truncated, then its new first line. HostLogFollower.decode and _note need no link.
    path = str(tmp_path / "torchrun-0.out")
    target = FollowTarget("job-1", "node0", node_ranks=(0, 1))
    follower = HostLogFollower(None, target)  # type: ignore[arg-type]  # no link used
    piece = Data(path, 0, 7, b"[default1]:" + b"z" * MAX_LINE)
    (open_line,) = follower.decode([piece])[0]
    assert open_line.rank == 1
    follower._note(Note(path, "truncated", "file shrank", 7))
    (fresh,) = follower.decode([Data(path, 0, 7, b"[default0]:fresh\n")])[0]
    assert (fresh.rank, fresh.text) == (0, "fresh")
