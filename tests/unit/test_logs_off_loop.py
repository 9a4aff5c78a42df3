"""Large log reads are decoded off the event loop, and nothing is lost or reordered.

The real follow program runs locally (LocalConnection) over files big enough that its
reads exceed ``OFF_LOOP_BYTES``; a subclass only records which thread decoded."""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path

from console.inventory import Host
from console.jobs.models import LogFile
from console.logs.follower import OFF_LOOP_BYTES, FollowTarget, HostLogFollower
from console.logs.frames import Data
from console.logs.models import FileCursor, LineRuns, rank_key
from console.logs.prefixes import context_for
from console.transport.local import LocalConnection

JOB = "offloop-20260101-000000-abcdef"
LINES = 20_000


class RecordingFollower(HostLogFollower):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.decoded_on: list[tuple[int, int]] = []  # (thread id, bytes)

    def decode(self, frames: list[Data]) -> tuple[LineRuns, dict[str, FileCursor]]:
        size = sum(len(f.data) for f in frames)
        self.decoded_on.append((threading.get_ident(), size))
        return super().decode(frames)


async def test_big_reads_are_decoded_in_a_worker_thread_in_order(tmp_path: Path) -> None:
    files = []
    for rank in (0, 1):
        path = tmp_path / f"rank-{rank}.out"
        path.write_text("".join(f"rank {rank} step {i} loss 0.5\n" for i in range(LINES)))
        files.append(context_for(JOB, "l0", LogFile(str(path), "stdout", "rank", rank, rank), None))
    follower = RecordingFollower(
        LocalConnection(Host(name="l0", address="local")),
        FollowTarget(JOB, "l0", files=tuple(files)),
        follow=False,
    )
    seen: dict[object, list[str]] = defaultdict(list)
    async for batch in follower.batches():
        for line in batch.lines:
            seen[rank_key(line)].append(line.text)
        if batch.finished:
            break
    for rank in (0, 1):
        assert seen[rank] == [f"rank {rank} step {i} loss 0.5" for i in range(LINES)]
    loop_thread = threading.get_ident()
    big = [thread for thread, size in follower.decoded_on if size >= OFF_LOOP_BYTES]
    small = [thread for thread, size in follower.decoded_on if size < OFF_LOOP_BYTES]
    assert big, follower.decoded_on  # the files are far larger than one hand-over
    assert all(thread != loop_thread for thread in big)
    assert all(thread == loop_thread for thread in small)
    # The resume point is every byte of both files.
    assert {c.offset for c in follower.cursors.values()} == {
        (tmp_path / "rank-0.out").stat().st_size
    }
