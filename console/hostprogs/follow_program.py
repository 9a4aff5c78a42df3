"""The remote log follower: sent on stdin to ``python3 -u - CONFIG_JSON`` on each host.

Standard library only, so it runs wherever Python 3 does. ONE process per host follows
every log file of a job from the byte offsets the console last delivered, plus files
that appear later under the job directory, and writes length-prefixed binary frames to
stdout: ``kind`` (1 byte) and payload length (4 bytes, big-endian), then the payload.
The file's bytes travel as they are (no base64, no JSON per chunk), so neither end
spends CPU per line on the framing:

- ``P``: ``id`` (4 bytes) + the path (UTF-8, surrogateescape): names a file once; data
  frames refer to it by ``id``.
- ``D``: ``id`` (4), ``start`` (8), ``inode`` (8, signed, -1 unknown) + raw bytes
  ``start..start+len`` of that file: whole lines (the console decodes UTF-8 with
  replacement). A chunk that does not end with a line end is a piece of a line longer
  than ``max_line`` (split there) or the unterminated last line of a file whose writers
  are done (``final`` / ``done`` markers); otherwise an unterminated line is held back
  until its newline comes. ``\\r`` (progress bars) ends a line too.
- ``J``: one JSON object, the rare control records:
  ``{"t":"n","p":path,"k":kind,"m":message,"i":inode}`` a note (truncated, rotated,
  missing, appeared, error); ``{"t":"o","p":path,"o":offset,"i":inode}`` where a file
  followed from its end starts; ``{"t":"hb","ts":...}`` heartbeat while idle (writing
  it is also how the follower notices that the console went away: broken pipe);
  ``{"t":"end"}`` everything was read and the follower exits.

The first frame is a ``J`` hello, ``{"program": "follower", "v": VERSION}``. The
console's reader is ``console/logs/frames.py``; it imports the layouts below.
"""

from __future__ import annotations

import fnmatch
import json
import os
import struct
import sys
import time
from typing import Any, BinaryIO

PROGRAM = "follower"
VERSION = 1  # of its frames
DEFAULT_PATTERNS = ("*.log", "*.out", "*.err", "stdout", "stderr")
FRAME = struct.Struct(">cI")  # kind, payload length
DATA = struct.Struct(">IQq")  # path id, start offset, inode (-1: unknown)
PATH = struct.Struct(">I")  # path id


class TrackedFile:
    """One followed file: an open handle, the next byte to read, and the held-back tail."""

    def __init__(self, key: str, offset: int, inode: int | None) -> None:
        self.key = key  # the path as the console spelled it (reported back verbatim)
        self.real = os.path.expanduser(key)
        self.offset = offset  # next byte to read from the file
        self.inode = inode
        self.handle: BinaryIO | None = None
        self.pending = b""  # bytes after the last line end, not yet emitted
        self.missing_noted = False
        self.id: int | None = None  # frame id, given when its first data is sent

    @property
    def emitted(self) -> int:
        return self.offset - len(self.pending)


class Follower:
    def __init__(self, cfg: dict[str, Any], out: BinaryIO) -> None:
        self.out = out
        self.poll = float(cfg.get("poll", 0.05))
        self.max_line = min(int(cfg.get("max_line", 32768)), 40000)
        # A read never exceeds max_line, so only a line begun in the held-back tail can
        # grow past max_line: _consume checks that one line only.
        self.chunk = min(int(cfg.get("chunk", 32768)), self.max_line)
        self.final = bool(cfg.get("final", False))
        self.from_end = bool(cfg.get("from_end", False))
        self.heartbeat = float(cfg.get("heartbeat", 2.0))
        self.done = [os.path.expanduser(p) for p in cfg.get("done", [])]
        # The host's supervisor records a final state once every process of the job here
        # has ended, also one KILLed before its wrapper could write its ``.exit`` file.
        self.sv_states = [os.path.expanduser(p) for p in cfg.get("sv_states", [])]
        self.sv_host = cfg.get("sv_host")
        self.dirs = cfg.get("dirs", [])
        self.files: dict[str, TrackedFile] = {}
        self.last_write = time.time()
        self.parent = os.getppid()
        self.positions: list[dict[str, Any]] = []  # where from_end files start
        self.ids: list[str] = []  # frame id -> path, in the order ids were given
        for spec in cfg.get("files", []):
            self._track(spec["p"], spec.get("o"), spec.get("i"), initial=True)

    # -- discovery -------------------------------------------------------------------

    def _track(self, key: str, offset: int | None, inode: int | None, initial: bool) -> None:
        if key in self.files:
            return
        if offset is None:
            offset = 0
            if initial and self.from_end:
                try:
                    st = os.stat(os.path.expanduser(key))
                    offset, inode = st.st_size, st.st_ino
                except OSError:
                    offset = 0
                self.positions.append({"t": "o", "p": key, "o": offset, "i": inode})
        self.files[key] = TrackedFile(key, offset, inode)

    def discover(self, initial: bool = False) -> None:
        for spec in self.dirs:
            root_key = spec["p"].rstrip("/")
            root = os.path.expanduser(root_key)
            patterns = spec.get("g") or DEFAULT_PATTERNS
            depth = int(spec.get("depth", 4))
            for dirpath, dirnames, filenames in os.walk(root):
                rel = os.path.relpath(dirpath, root)
                level = 0 if rel == "." else rel.count(os.sep) + 1
                if level >= depth:
                    dirnames[:] = []
                for name in filenames:
                    if not any(fnmatch.fnmatch(name, p) for p in patterns):
                        continue
                    key = root_key + "/" + (name if rel == "." else rel + "/" + name)
                    if key not in self.files:
                        self._track(key, None, None, initial)
                        if not initial:
                            self.note(key, "appeared", "")

    # -- output ----------------------------------------------------------------------

    def write(self, obj: dict[str, Any]) -> None:
        payload = json.dumps(obj, separators=(",", ":")).encode("ascii")
        self.out.write(FRAME.pack(b"J", len(payload)) + payload)
        self.last_write = time.time()

    def note(self, key: str, kind: str, message: str, inode: int | None = None) -> None:
        self.write({"t": "n", "p": key, "k": kind, "m": message, "i": inode})
        self.out.flush()

    def emit(self, tracked: TrackedFile, data: bytes, start: int) -> None:
        """Send whole lines (or one forced piece) of ``tracked`` as one data frame."""
        if tracked.id is None:
            tracked.id = len(self.ids)
            self.ids.append(tracked.key)
            name = tracked.key.encode("utf-8", "surrogateescape")
            self.out.write(FRAME.pack(b"P", PATH.size + len(name)) + PATH.pack(tracked.id) + name)
        inode = -1 if tracked.inode is None else tracked.inode
        self.out.write(
            FRAME.pack(b"D", DATA.size + len(data)) + DATA.pack(tracked.id, start, inode)
        )
        self.out.write(data)
        self.last_write = time.time()

    # -- reading ---------------------------------------------------------------------

    def _open(self, tracked: TrackedFile) -> bool:
        try:
            handle = open(tracked.real, "rb")  # noqa: SIM115 - kept open across polls
        except FileNotFoundError:
            if not tracked.missing_noted:
                tracked.missing_noted = True
                self.note(tracked.key, "missing", "not there yet")
            return False
        except OSError as exc:
            if not tracked.missing_noted:
                tracked.missing_noted = True
                self.note(tracked.key, "error", str(exc))
            return False
        st = os.fstat(handle.fileno())
        if tracked.inode is not None and st.st_ino != tracked.inode and tracked.offset:
            self.note(tracked.key, "rotated", "a new file replaced it; reading from 0", st.st_ino)
            tracked.offset = 0
        elif st.st_size < tracked.offset:
            self.note(tracked.key, "truncated", f"size {st.st_size} < offset {tracked.offset}")
            tracked.offset = 0
        tracked.inode = st.st_ino
        tracked.pending = b""
        tracked.missing_noted = False
        handle.seek(tracked.offset)
        tracked.handle = handle
        return True

    def _split_point(self, buf: bytes) -> int:
        """Index just past the last line end in buf (0 when none).

        A ``\\r`` as the very last byte is held: it may be the start of ``\\r\\n``.
        """
        nl = buf.rfind(b"\n")
        cr = buf.rfind(b"\r", 0, len(buf) - 1)
        return max(nl, cr) + 1

    def _cut(self, buf: bytes, limit: int) -> int:
        """A cut at most ``limit`` bytes in that does not split a UTF-8 sequence."""
        cut = limit
        for _ in range(3):
            if cut > 0 and cut < len(buf) and (buf[cut] & 0xC0) == 0x80:
                cut -= 1
        return cut if cut > 0 else limit

    def read(self, tracked: TrackedFile, flush_tail: bool) -> bool:
        """Read what is new in one file; True when a full chunk came (more may wait)."""
        if tracked.handle is None and not self._open(tracked):
            return False
        self._check_replaced(tracked)
        handle = tracked.handle
        if handle is None:
            return False
        try:
            size = os.fstat(handle.fileno()).st_size
        except OSError:
            size = tracked.offset
        if size < tracked.offset:
            if tracked.pending:
                self.emit(tracked, tracked.pending, tracked.emitted)
            self.note(tracked.key, "truncated", f"size {size} < offset {tracked.offset}")
            tracked.offset = 0
            tracked.pending = b""
            handle.seek(0)
        data = handle.read(self.chunk)
        full = len(data) >= self.chunk
        if data:
            self._consume(tracked, data)
        if flush_tail and not full and tracked.pending:
            self.emit(tracked, tracked.pending, tracked.emitted)
            tracked.pending = b""
        return full

    def _check_replaced(self, tracked: TrackedFile) -> None:
        """Rotation: the path now names another file. Finish the old one, then switch."""
        try:
            st = os.stat(tracked.real)
        except OSError:
            return  # removed: keep reading the open handle
        if st.st_ino == tracked.inode:
            return
        while self.read_open(tracked):
            pass
        if tracked.pending:
            self.emit(tracked, tracked.pending, tracked.emitted)
            tracked.pending = b""
        assert tracked.handle is not None
        tracked.handle.close()
        tracked.handle = None
        self.note(tracked.key, "rotated", "a new file replaced it; reading from 0", st.st_ino)
        tracked.offset = 0
        tracked.inode = None
        self._open(tracked)

    def read_open(self, tracked: TrackedFile) -> bool:
        """Drain step on the currently open handle without the replacement check."""
        assert tracked.handle is not None
        data = tracked.handle.read(self.chunk)
        if not data:
            return False
        self._consume(tracked, data)
        return True

    def _consume(self, tracked: TrackedFile, data: bytes) -> None:
        """Emit the whole lines of pending + data; keep the unterminated tail pending."""
        start = tracked.emitted
        buf = tracked.pending + data
        tracked.offset += len(data)
        # Only the first line (begun in the held-back tail) can exceed max_line.
        while len(buf) > self.max_line and self._first_end(buf, self.max_line + 1) == 0:
            cut = self._cut(buf, self.max_line)
            self.emit(tracked, buf[:cut], start)
            start += cut
            buf = buf[cut:]
        cut = self._split_point(buf)
        if cut:
            self.emit(tracked, buf[:cut], start)
        tracked.pending = buf[cut:]

    def _first_end(self, buf: bytes, within: int) -> int:
        """Index just past the first line end among the first ``within`` bytes (0: none)."""
        nl = buf.find(b"\n", 0, within)
        cr = buf.find(b"\r", 0, min(within, len(buf) - 1))
        ends = [i for i in (nl, cr) if i >= 0]
        return min(ends) + 1 if ends else 0

    # -- main loop -------------------------------------------------------------------

    def writers_done(self) -> bool:
        if self.done and all(os.path.exists(p) for p in self.done):
            return True
        return any(self._supervisor_ended(p) for p in self.sv_states)

    def _supervisor_ended(self, path: str) -> bool:
        try:
            with open(path, encoding="utf-8") as handle:
                record = json.load(handle)
        except (OSError, ValueError):
            return False
        if not isinstance(record, dict) or record.get("host") != self.sv_host:
            return False  # a shared home: another host's supervisor
        return record.get("state") not in (None, "running", "hung")

    def cycle(self, flush_tail: bool) -> bool:
        busy = False
        for tracked in list(self.files.values()):
            if self.read(tracked, flush_tail):
                busy = True
        self.out.flush()
        return busy

    def run(self) -> None:
        self.write({"program": PROGRAM, "v": VERSION})
        self.discover(initial=True)
        for position in self.positions:
            self.write(position)
        last_discover = time.time()
        while True:
            finishing = self.final or self.writers_done()
            if finishing:
                self.discover()
                while self.cycle(flush_tail=False):
                    pass
                self.cycle(flush_tail=True)
                self.write({"t": "end"})
                self.out.flush()
                return
            busy = self.cycle(flush_tail=False)
            now = time.time()
            if now - last_discover >= 0.5:
                self.discover()
                last_discover = now
            if now - self.last_write >= self.heartbeat:
                self.write({"t": "hb", "ts": now})
                self.out.flush()
            if os.getppid() != self.parent:
                return  # the ssh session that started us is gone
            if not busy:
                time.sleep(self.poll)


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[1]) if len(argv) > 1 else {}
    try:
        Follower(cfg, sys.stdout.buffer).run()
    except (BrokenPipeError, KeyboardInterrupt):
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
