"""Reading the log follower's frames (``console/hostprogs/follow_program.py`` writes them)
into typed records.

The layout (kind byte, length, then the payload) and the data header are the program's
own ``struct`` definitions, imported from it, so the two ends cannot drift. ``J``
frames become :class:`Hello`, :class:`Note`, :class:`Position`, :class:`Heartbeat` or
:class:`End`; an unknown control record is an error, not something to skip.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from console.hostprogs.follow_program import DATA, FRAME, PATH


@dataclass(frozen=True, slots=True)
class Hello:
    """The program's first record: its name and wire version."""

    program: str
    version: int


@dataclass(frozen=True, slots=True)
class Data:
    """Bytes ``start .. start+len(data)`` of ``path`` (whole lines, or a forced piece)."""

    path: str
    start: int
    inode: int | None
    data: bytes


@dataclass(frozen=True, slots=True)
class Note:
    """Something happened to a file: truncated, rotated, missing, appeared, error."""

    path: str
    kind: str
    message: str
    inode: int | None


@dataclass(frozen=True, slots=True)
class Position:
    """Where a file followed from its end starts."""

    path: str
    offset: int
    inode: int | None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    ts: float


@dataclass(frozen=True, slots=True)
class End:
    """Everything was read; the follower exits."""


Frame = Hello | Data | Note | Position | Heartbeat | End


def _inode(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def control(record: Any) -> Frame:
    """One ``J`` frame's JSON object as its typed record. Raises ValueError."""
    if not isinstance(record, dict):
        raise ValueError(f"a control record that is not an object: {record!r:.200}")
    kind = record.get("t")
    if kind is None and "program" in record:
        return Hello(str(record["program"]), record.get("v", -1))
    if kind == "n":
        return Note(
            str(record["p"]), str(record["k"]), str(record.get("m", "")), _inode(record.get("i"))
        )
    if kind == "o":
        return Position(str(record["p"]), int(record["o"]), _inode(record.get("i")))
    if kind == "hb":
        return Heartbeat(float(record.get("ts", 0.0)))
    if kind == "end":
        return End()
    raise ValueError(f"an unknown control record: {record!r:.200}")


def read_frames(buf: bytes | bytearray, paths: dict[int, str]) -> tuple[list[Frame], int]:
    """The complete frames at the start of ``buf``, and how many bytes they took.

    ``P`` frames fill ``paths`` and are not returned. Raises ValueError, KeyError or
    struct.error on bytes that are not frames."""
    out: list[Frame] = []
    at, size, header = 0, len(buf), FRAME.size
    view = memoryview(buf)
    try:
        while size - at >= header:
            kind, length = FRAME.unpack_from(buf, at)
            end = at + header + length
            if end > size:
                break
            body = at + header
            if kind == b"D":
                pid, start, inode = DATA.unpack_from(buf, body)
                data = bytes(view[body + DATA.size : end])
                out.append(Data(paths[pid], start, None if inode < 0 else inode, data))
            elif kind == b"J":
                out.append(control(json.loads(bytes(view[body:end]))))
            elif kind == b"P":
                (pid,) = PATH.unpack_from(buf, body)
                paths[pid] = bytes(view[body + PATH.size : end]).decode("utf-8", "surrogateescape")
            else:
                raise ValueError(f"unknown frame kind {kind!r} at byte {at}")
            at = end
    finally:
        view.release()
    return out, at
