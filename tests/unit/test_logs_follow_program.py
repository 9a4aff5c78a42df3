"""The remote follower program, run for real as ``python3 -u - CONFIG`` on local files."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import pytest

from console.hostprogs.follow_program import FRAME, PROGRAM, VERSION
from console.logs import frames as f
from console.logs.follower import program_source
from console.logs.frames import read_frames

pytestmark = pytest.mark.timeout(60)


def run_final(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """Run the follower in drain mode (read to the end, flush, exit); its records."""
    cfg = {**cfg, "final": True}
    proc = subprocess.run(
        [sys.executable, "-u", "-", json.dumps(cfg)],
        input=program_source().encode(),
        capture_output=True,
        timeout=30,
        check=True,
    )
    return records_of(proc.stdout)


def as_record(frame: f.Frame) -> dict[str, Any]:
    """A typed frame as a plain record the tests compare: a data frame as {"t": "d",
    "c": [[path, start, end, inode, data]]}, the others in their wire spelling."""
    if isinstance(frame, f.Data):
        end = frame.start + len(frame.data)
        return {"t": "d", "c": [[frame.path, frame.start, end, frame.inode, frame.data]]}
    if isinstance(frame, f.Note):
        return {"t": "n", "p": frame.path, "k": frame.kind, "m": frame.message, "i": frame.inode}
    if isinstance(frame, f.Position):
        return {"t": "o", "p": frame.path, "o": frame.offset, "i": frame.inode}
    if isinstance(frame, f.Heartbeat):
        return {"t": "hb", "ts": frame.ts}
    if isinstance(frame, f.Hello):
        return {"t": "hello", "program": frame.program, "v": frame.version}
    return {"t": "end"}


def records_of(raw: bytes) -> list[dict[str, Any]]:
    frames, used = read_frames(raw, {})
    assert used == len(raw)  # nothing but whole frames
    records = [as_record(frame) for frame in frames]
    # Every run opens with the versioned hello, before any other frame.
    assert records[0] == {"t": "hello", "program": PROGRAM, "v": VERSION}
    return records[1:]


class FrameReader:
    """Records from a live follower's stdout pipe, one frame at a time."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self.pipe = pipe
        self.paths: dict[int, str] = {}

    def next(self) -> dict[str, Any]:
        while True:
            header = self.pipe.read(FRAME.size)
            _kind, length = FRAME.unpack(header)
            frames, _used = read_frames(header + self.pipe.read(length), self.paths)
            if frames:
                return as_record(frames[0])


def chunks(records: list[dict[str, Any]], path: str | None = None) -> list[tuple[int, int, bytes]]:
    found = []
    for record in records:
        if record["t"] == "d":
            for p, start, end, _inode, data in record["c"]:
                if path is None or p == path:
                    assert len(data) == end - start
                    found.append((start, end, data))
    return found


def notes(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in records if r["t"] == "n" and r["k"] == kind]


def test_whole_lines_contiguous_offsets_and_final_flush(tmp_path: Path) -> None:
    log = tmp_path / "rank-0.out"
    log.write_bytes(b"".join(b"line %d\n" % i for i in range(1000)) + b"tail without newline")
    records = run_final({"files": [{"p": str(log), "o": 0}]})
    got = chunks(records, str(log))
    assert got[0][0] == 0
    for (_s0, e0, _d0), (s1, _e1, _d1) in itertools.pairwise(got):
        assert s1 == e0
    assert b"".join(d for _s, _e, d in got) == log.read_bytes()
    assert records[-1] == {"t": "end"}


def test_resume_from_an_offset_repeats_nothing(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"".join(b"n%d\n" % i for i in range(10)))
    offset = len(b"n0\nn1\nn2\n")
    inode = os.stat(log).st_ino
    records = run_final({"files": [{"p": str(log), "o": offset, "i": inode}]})
    data = b"".join(d for _s, _e, d in chunks(records))
    assert data == b"".join(b"n%d\n" % i for i in range(3, 10))
    assert not notes(records, "truncated") and not notes(records, "rotated")


def test_truncated_file_restarts_at_zero_with_a_note(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"fresh 1\nfresh 2\n")
    records = run_final({"files": [{"p": str(log), "o": 10_000, "i": os.stat(log).st_ino}]})
    assert notes(records, "truncated")
    assert b"".join(d for _s, _e, d in chunks(records)) == b"fresh 1\nfresh 2\n"


def test_replaced_file_is_read_from_zero_with_a_note(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"new file line\n" * 3)
    records = run_final({"files": [{"p": str(log), "o": 14, "i": os.stat(log).st_ino + 1}]})
    assert notes(records, "rotated")
    assert chunks(records)[0][0] == 0


def test_long_line_is_split_at_the_limit(tmp_path: Path) -> None:
    log = tmp_path / "long.log"
    line = ("é" * 50_000 + "x").encode()  # two-byte characters: cuts must not split them
    log.write_bytes(b"short\n" + line + b"\nafter\n")
    records = run_final({"files": [{"p": str(log), "o": 0}], "max_line": 32768})
    got = chunks(records)
    assert b"".join(d for _s, _e, d in got) == log.read_bytes()
    for _s, _e, data in got:
        # a chunk is whole lines or one piece of a long line; no piece ends inside a character
        assert all(len(piece) <= 32769 for piece in data.split(b"\n"))
        data.decode("utf-8")
    assert sum(1 for _s, _e, d in got if not d.endswith(b"\n")) == 3  # 100001 bytes: 4 pieces


def test_binary_garbage_is_never_fatal(tmp_path: Path) -> None:
    log = tmp_path / "bin.log"
    garbage = os.urandom(300_000) + b"\x00\xff\xfe\n"
    log.write_bytes(b"before\n" + garbage + b"after\n")
    records = run_final({"files": [{"p": str(log), "o": 0}]})
    got = chunks(records)
    assert b"".join(d for _s, _e, d in got) == log.read_bytes()


def test_carriage_return_ends_a_progress_bar_line(tmp_path: Path) -> None:
    log = tmp_path / "bar.log"
    log.write_bytes(b" 10%|#  | 1/10\r 20%|## | 2/10\r 30%|###| 3/10\rwindows\r\n")
    proc = subprocess.Popen(
        [sys.executable, "-u", "-", json.dumps({"files": [{"p": str(log), "o": 0}]})],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(program_source().encode())
    proc.stdin.close()
    reader = FrameReader(proc.stdout)
    try:
        record = reader.next()
        while record["t"] != "d":
            record = reader.next()
        data = b"".join(c[4] for c in record["c"])
        assert data == log.read_bytes()
    finally:
        proc.kill()
        proc.wait()


def start_follower(cfg: dict[str, Any]) -> subprocess.Popen[bytes]:
    """A live follower (not drain mode), its source sent on stdin as to a host."""
    proc = subprocess.Popen(
        [sys.executable, "-u", "-", json.dumps(cfg)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdin is not None
    proc.stdin.write(program_source().encode())
    proc.stdin.close()
    return proc


def test_follow_holds_a_partial_line_and_finds_new_files(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank-0.out").write_bytes(b"one\ntw")
    cfg = {"dirs": [{"p": str(job)}], "poll": 0.02, "heartbeat": 0.5}
    proc = start_follower(cfg)
    assert proc.stdout is not None
    seen: list[dict[str, Any]] = []
    reader = FrameReader(proc.stdout)

    def until(cond: Any) -> None:
        deadline = time.monotonic() + 10
        while not cond():
            assert time.monotonic() < deadline, seen
            seen.append(reader.next())

    try:
        until(lambda: chunks(seen))
        assert b"".join(d for _s, _e, d in chunks(seen)) == b"one\n"
        with open(job / "rank-0.out", "ab") as handle:
            handle.write(b"o\n")
        (job / "sub").mkdir()
        (job / "sub" / "stderr").write_bytes(b"late file\n")
        (job / "rank-0.exit").write_bytes(b"0\n")  # not a log: never followed
        until(lambda: len(chunks(seen)) >= 3)
        by_path = {  # the last chunk of each file
            p: b for r in seen if r["t"] == "d" for p, _s, _e, _i, b in r["c"]
        }
        assert by_path[str(job / "sub" / "stderr")] == b"late file\n"
        assert by_path[str(job / "rank-0.out")] == b"two\n"
        assert notes(seen, "appeared")
        assert not any(str(p).endswith(".exit") for p in by_path)
        until(lambda: any(r["t"] == "hb" for r in seen))
    finally:
        proc.kill()
        proc.wait()


def test_done_markers_flush_the_last_partial_line_and_end(tmp_path: Path) -> None:
    log = tmp_path / "worker-0.out"
    log.write_bytes(b"first\nno newline at exit")
    marker = tmp_path / "worker-0.exit"
    marker.write_text("0\n")
    cfg = {"files": [{"p": str(log), "o": 0}], "done": [str(marker)], "poll": 0.02}
    proc = subprocess.run(
        [sys.executable, "-u", "-", json.dumps(cfg)],
        input=program_source().encode(),
        capture_output=True,
        timeout=30,
        check=True,
    )
    records = records_of(proc.stdout)
    assert b"".join(d for _s, _e, d in chunks(records)) == log.read_bytes()
    assert records[-1] == {"t": "end"}


def test_a_supervisors_final_state_ends_a_follow_whose_exit_file_never_came(
    tmp_path: Path,
) -> None:
    """A process KILLed with its wrapper writes no ``.exit``: the host's supervisor's
    final record ends the follow. Another host's record (a shared home) or a running
    one does not."""
    log = tmp_path / "ps-0.out"
    log.write_bytes(b"up\nTerminated")
    leader = tmp_path / "supervisor.json"
    mine = tmp_path / "supervisor.node1.json"
    cfg = {
        "files": [{"p": str(log), "o": 0}],
        "done": [str(tmp_path / "ps-0.exit")],  # never written
        "sv_states": [str(leader), str(mine)],
        "sv_host": "node1",
        "poll": 0.02,
        "heartbeat": 0.2,
    }
    leader.write_text(json.dumps({"host": "node0", "state": "failed"}))
    mine.write_text(json.dumps({"host": "node1", "state": "running"}))
    proc = start_follower(cfg)
    assert proc.stdout is not None
    reader = FrameReader(proc.stdout)
    seen: list[dict[str, Any]] = []
    try:
        while sum(r["t"] == "hb" for r in seen) < 2:  # still following
            seen.append(reader.next())
        assert proc.poll() is None
        mine.write_text(json.dumps({"host": "node1", "state": "failed"}))
        while not seen or seen[-1] != {"t": "end"}:
            seen.append(reader.next())
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()
    assert b"".join(d for _s, _e, d in chunks(seen)) == log.read_bytes()


def test_from_end_reports_where_it_starts(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"old\n" * 5)
    records = run_final({"files": [{"p": str(log)}], "from_end": True})
    assert [r for r in records if r["t"] == "o"] == [
        {"t": "o", "p": str(log), "o": 20, "i": os.stat(log).st_ino}
    ]
    assert not chunks(records)


def test_frames_decode_to_typed_records_and_unknown_control_is_an_error() -> None:
    assert f.control({"program": "follower", "v": 1}) == f.Hello("follower", 1)
    assert f.control({"t": "o", "p": "/a", "o": 5, "i": None}) == f.Position("/a", 5, None)
    assert f.control({"t": "n", "p": "/a", "k": "missing", "m": "x", "i": 3}) == f.Note(
        "/a", "missing", "x", 3
    )
    with pytest.raises(ValueError, match="unknown control record"):
        f.control({"t": "zz"})
