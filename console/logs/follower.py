"""Client side of the log follower: start it on a host, turn its frames into batches,
and resume after a disconnect from the last offset delivered.

"Delivered" means handed to the consumer: a batch's file offsets become the resume
point the moment it is yielded, so a restart neither repeats nor skips a line.

The program's stdout is read as bytes (``start_bytes``/``chunks``): everything that
came in one read becomes one batch, whose lines are :class:`LineRuns` (one run per file
chunk: decoded once, never split per line here).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import struct
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from console.errors import FollowError, HostUnavailable, JobError, TransportError
from console.hostprogs import follow_program
from console.logs.frames import Data, End, Frame, Hello, Note, Position, read_frames
from console.logs.models import FileCursor, FollowNote, LineRun, LineRuns, LogBatch
from console.logs.prefixes import FileAttribution, FileContext, guess_context
from console.transport.base import HostConnection, RemoteProcess
from console.transport.hello import check_hello, hello
from console.transport.ship import HostProgram, shipment
from console.transport.streams import stderr_summary

MAX_LINE = 32768  # bytes; longer lines are split into pieces (the follower does it)
HEARTBEAT_S = 2.0
SILENCE_LIMIT_S = 10.0  # no record (not even a heartbeat) for this long: the link is dead
# Reads with at least this much line data are decoded in a worker thread (a smaller one
# costs less inline than the hand-over).
OFF_LOOP_BYTES = 16384


def program_source() -> str:
    return Path(follow_program.__file__).read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class FollowTarget:
    """What to follow on one host: planned files, directories to list, done markers."""

    job_id: str
    host: str
    files: tuple[FileContext, ...] = ()
    dirs: tuple[str, ...] = ()  # listed for files that appear later (job directory)
    done_markers: tuple[str, ...] = ()  # all present: the writers finished (``.exit`` files)
    # Or this host's supervisor recorded a final state (``jobs.paths.supervisor_states``):
    # a process KILLed with its wrapper leaves no ``.exit`` file.
    supervisor_states: tuple[str, ...] = ()
    node_ranks: tuple[int, ...] = ()  # global ranks of this host's local ranks, for guessing
    patterns: tuple[str, ...] = ()  # file name globs for dirs; () = the follower's defaults


class HostLogFollower:
    """Follows one host's log files of a job; ``batches()`` yields :class:`LogBatch`."""

    def __init__(
        self,
        conn: HostConnection,
        target: FollowTarget,
        *,
        follow: bool = True,
        since_start: bool = True,
        cursors: Mapping[str, FileCursor] | None = None,
        poll_s: float = 0.05,
        max_line: int = MAX_LINE,
        retry_first_s: float = 0.5,
        retry_max_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.conn = conn
        self.target = target
        self.follow = follow
        self.since_start = since_start
        self.cursors: dict[str, FileCursor] = dict(cursors or {})
        self.poll_s = poll_s
        self.max_line = max_line
        self.retry_first_s = retry_first_s
        self.retry_max_s = retry_max_s
        self.clock = clock
        self.contexts: dict[str, FileContext] = {c.path: c for c in target.files}
        self._attribution: dict[str, FileAttribution] = {}
        self.restarts = 0
        self.finished = False
        self._started_once = False

    # -- remote side -------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        paths = list(self.contexts)
        paths += [p for p in self.cursors if p not in self.contexts]
        files: list[dict[str, Any]] = []
        for path in paths:
            cursor = self.cursors.get(path)
            if cursor is None:
                files.append({"p": path, "o": None, "i": None})
            else:
                files.append({"p": path, "o": cursor.offset, "i": cursor.inode})
        dirs = [{"p": d, "g": list(self.target.patterns), "depth": 6} for d in self.target.dirs]
        return {
            "files": files,
            "dirs": dirs,
            "poll": self.poll_s,
            "max_line": self.max_line,
            "final": not self.follow,
            # Only the very first start may skip old output; after a restart every file
            # either has a cursor or appeared while we were away (read from 0).
            "from_end": not self.since_start and not self._started_once,
            "done": list(self.target.done_markers) if self.follow else [],
            "sv_states": list(self.target.supervisor_states) if self.follow else [],
            "sv_host": self.target.host,
            "heartbeat": HEARTBEAT_S,
        }

    async def _start(self) -> RemoteProcess:
        program = HostProgram(
            follow_program.PROGRAM, program_source(), (json.dumps(self.config()),)
        )
        # No setup line: the follower needs nothing but the standard library, and a slow
        # setup (conda) would delay every resume.
        sent = shipment(self.conn.host, program, setup=False)
        process = await self.conn.start_bytes(sent.command)
        try:
            await process.write(sent.stdin)
            process.write_eof()
        except TransportError as exc:
            # It ended before its program was written (no python3 there): say why.
            status = await _exit_status(process)
            process.close()
            if status is None:
                raise
            detail = stderr_summary(process) or str(exc)
            raise FollowError(
                self.conn.host.name, f"log follower exited with status {status}: {detail}"
            ) from None
        self._started_once = True
        return process

    # -- records -> batches ------------------------------------------------------------

    def context(self, path: str) -> FileContext:
        ctx = self.contexts.get(path)
        if ctx is None:
            ctx = guess_context(self.target.job_id, self.target.host, path, self.target.node_ranks)
            self.contexts[path] = ctx
        return ctx

    def attribution(self, path: str) -> FileAttribution:
        found = self._attribution.get(path)
        if found is None:
            found = self._attribution[path] = FileAttribution(self.context(path))
        return found

    def decode(self, frames: list[Data]) -> tuple[LineRuns, dict[str, FileCursor]]:
        """Lines and the cursors they advance to, from data frames (see follow_program).
        Lines are never longer than ``max_line``: the program cuts them in bytes, and a
        line has no more characters than bytes."""
        now = self.clock()
        out: list[LineRun] = []
        advanced: dict[str, FileCursor] = {}
        for frame in frames:
            out += self.attribution(frame.path).runs(frame.data.decode("utf-8", "replace"), now)
            advanced[frame.path] = FileCursor(frame.start + len(frame.data), frame.inode)
        return LineRuns(out), advanced

    async def _data_batch(self, frames: list[Data]) -> LogBatch:
        """The batch of these data frames. A large read is decoded (UTF-8, rank
        attribution, runs) in a worker thread, so the event loop (the UI's keys and
        frames, other hosts) keeps its turns while a firehose arrives; the cursors
        advance here, on the loop, as the batch is handed over."""
        if sum(len(frame.data) for frame in frames) >= OFF_LOOP_BYTES:
            lines, advanced = await asyncio.to_thread(self.decode, frames)
        else:
            lines, advanced = self.decode(frames)
        self.cursors.update(advanced)
        return LogBatch(self.target.host, lines, (), self.clock())

    def _note(self, note: Note) -> FollowNote:
        if note.kind in ("truncated", "rotated"):
            self.cursors[note.path] = FileCursor(0, note.inode)
            # A line the old content left open does not go on in the new one.
            self._attribution.pop(note.path, None)
        return FollowNote(self.target.host, note.path, note.kind, note.message)

    async def _reads(self, process: RemoteProcess) -> AsyncIterator[list[Frame]]:
        """The frames of each read, in order; ends when the process or the link ends or
        goes silent."""
        iterator = process.chunks().__aiter__()
        buf = bytearray()
        paths: dict[int, str] = {}
        while True:
            try:
                # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a
                # cancellation that races with the read completing.
                async with asyncio.timeout(SILENCE_LIMIT_S):
                    data = await iterator.__anext__()
            except (StopAsyncIteration, TimeoutError):
                return
            # A stream that always has data buffered never suspends on its own; give the
            # event loop (the UI, other hosts) a turn after every read.
            await asyncio.sleep(0)
            if buf:
                buf += data
                pending: bytes | bytearray = buf
            else:
                pending = data
            try:
                frames, used = read_frames(pending, paths)
            except (ValueError, KeyError, struct.error) as exc:
                raise JobError(
                    f"{self.target.host}: log follower wrote an unreadable frame: "
                    f"{bytes(pending[:200])!r}"
                ) from exc
            # A frame bigger than a read arrives over many reads: keep the partial frame
            # in place (del of nothing when no frame ended) instead of copying the whole
            # buffer after every read, which made a firehose quadratic in the frame size.
            if used == len(pending):
                buf = bytearray()
            elif pending is buf:
                del buf[:used]
            else:
                buf = bytearray(pending[used:])
            if frames:
                yield frames

    def _check_hello(self, frame: Frame) -> None:
        """The first control record must be this console's follower hello (HostProgramError)."""
        check_hello(
            self.target.host,
            follow_program.PROGRAM,
            follow_program.VERSION,
            _hello_record(frame),
        )

    async def batches(self) -> AsyncIterator[LogBatch]:
        host = self.target.host
        attempt = 0
        while True:
            try:
                process = await self._start()
            except HostUnavailable:
                if not self.follow and not self._started_once:
                    raise
                delay = min(self.retry_max_s, self.retry_first_s * 2**attempt)
                attempt += 1
                await asyncio.sleep(delay * random.uniform(0.8, 1.2))
                continue
            if attempt or self.restarts:
                yield LogBatch(host, (), (FollowNote(host, "", "resumed", ""),), self.clock())
            attempt = 0
            ended = False
            try:
                greeted = False
                async for frames in self._reads(process):
                    data: list[Data] = []
                    for frame in frames:
                        if not greeted:
                            self._check_hello(frame)
                            greeted = True
                        elif isinstance(frame, Data):
                            data.append(frame)
                            continue
                        if data:  # in order: a note may reset the cursor data advanced
                            yield await self._data_batch(data)
                            data = []
                        if isinstance(frame, Note):
                            yield LogBatch(host, (), (self._note(frame),), self.clock())
                        elif isinstance(frame, Position):
                            self.cursors[frame.path] = FileCursor(frame.offset, frame.inode)
                        elif isinstance(frame, End):
                            ended = True
                            break
                    if data:
                        yield await self._data_batch(data)
                    if ended:
                        break
            finally:
                process.close()
            if ended:
                self.finished = True
                yield LogBatch(host, (), (), self.clock(), finished=True)
                return
            status = await _exit_status(process)
            if status not in (None, 0):
                detail = stderr_summary(process)
                raise FollowError(host, f"log follower exited with status {status}: {detail}")
            self.restarts += 1
            yield LogBatch(host, (), (FollowNote(host, "", "disconnected", ""),), self.clock())
            await asyncio.sleep(self.retry_first_s)


def _hello_record(frame: Frame) -> object:
    return hello(frame.program, frame.version) if isinstance(frame, Hello) else frame


async def _exit_status(process: RemoteProcess) -> int | None:
    with contextlib.suppress(TimeoutError):
        return await asyncio.wait_for(process.wait(), 2.0)
    return None


async def follow_hosts(
    followers: Sequence[HostLogFollower], *, queue_batches: int = 16
) -> AsyncIterator[LogBatch]:
    """Batches of several hosts' followers as they come. A host whose follower fails is
    reported as an ``error`` note and left out; the others carry on. At most
    ``queue_batches`` wait (a read each, up to 256 KiB): beyond, the followers wait and
    the rest stays in the hosts' files (256 could hold 64 MiB read, as much decoded)."""
    queue: asyncio.Queue[LogBatch | None] = asyncio.Queue(queue_batches)

    async def pump(follower: HostLogFollower) -> None:
        # No `finally`: a cancelled pump must not block on a full queue; every other
        # ending puts the end marker so the consumer stops waiting for this host.
        try:
            async for batch in follower.batches():
                await queue.put(batch)
        except (JobError, TransportError) as exc:
            note = FollowNote(follower.target.host, "", "error", str(exc))
            await queue.put(LogBatch(follower.target.host, (), (note,), time.time(), True))
        except Exception as exc:  # a bug: report it instead of hanging the consumer
            await queue.put(None)
            raise exc
        await queue.put(None)

    tasks = [asyncio.create_task(pump(f), name=f"logs:{f.target.host}") for f in followers]
    running = len(tasks)
    try:
        while running:
            batch = await queue.get()
            if batch is None:
                running -= 1
                continue
            yield batch
    finally:
        for task in tasks:
            task.cancel()
        # A pump may be blocked on the full queue: keep it drained until all have ended.
        while not all(task.done() for task in tasks):
            while not queue.empty():
                queue.get_nowait()
            await asyncio.wait(tasks, timeout=0.1)
        await asyncio.gather(*tasks, return_exceptions=True)
