"""The supervisor's part that watches for a hang and takes the captures.

With ``hang_timeout`` set, the leader reads its processes' progress (``hang_capture.py``'s
``hang_last_progress``) and the followers' (their heartbeats carry it); once the newest is
older than the timeout it records the hang, tells every follower to capture and
captures here (``hang_capture``), then feeds the policy a ``HangSeen`` (which stops the
job when ``stop_on_hang``). A follower sends its captures' names to the leader, whose
``hang.captured`` lists every host's. Every ``SV_GPU_EVERY_S`` each supervisor takes one
GPU sample of the job's GPUs (``hang_gpu_sample``). Without ``hang_capture.py`` in the
source none of this runs.

A part of the supervisor's single source (``supervisor_source.py``): standard library
only, Python >= 3.7, names prefixed ``sv_``/``Sv``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if __name__ != "__main__":  # imported by the console/tests; on a host the parts precede
    from console.hostprogs.supervisor.local import SV_GPU_EVERY_S, SvLocal
    from console.hostprogs.supervisor.policy import HangSeen, JobPolicy


class SvHangWatch:
    """The hang side of :class:`Supervisor` (a mixin: the state lives there)."""

    job_dir: str
    is_leader: bool
    started_at: float
    local: SvLocal
    policy: JobPolicy
    progress: dict[str, float]
    hang: dict[str, Any] | None
    hang_timeout: float | None
    stop_on_hang: bool
    hang_api: dict[str, Callable[..., Any]] | None
    last_gpu: float
    dirty: bool

    if TYPE_CHECKING:  # provided by Supervisor and SvPeers; stubs here would shadow them

        def event(self, event: str, **details: Any) -> None: ...
        def apply(self, stop_now: bool) -> None: ...
        def broadcast(self, message: dict[str, Any]) -> None: ...
        def send_leader(self, message: dict[str, Any]) -> None: ...

    def local_progress(self) -> float | None:
        if self.hang_api is None or not self.hang_timeout:
            return None
        # Not the rendezvous store's log: it trains nothing (supervisor/rendezvous.py).
        names = [
            n
            for n, p in self.local.procs.items()
            if n not in self.local.ended and p.get("role") != "rendezvous"
        ]
        with contextlib.suppress(Exception):
            return float(self.hang_api["progress"](self.job_dir, names))
        return None

    def check_hang(self) -> None:
        if not self.is_leader or self.hang is not None or self.policy.verdict is not None:
            return
        progress = self.local_progress()
        if progress is None:
            return
        newest = max([progress, self.started_at, *self.progress.values()])
        idle = time.time() - newest
        if idle < float(self.hang_timeout or 0):
            return
        self.hang = {"at": time.time(), "idle_s": idle, "captured": []}
        self.event("hang", idle_s=idle)
        self.broadcast({"type": "capture"})
        self.capture()
        self.apply(self.policy.feed(HangSeen(time.time(), idle, self.stop_on_hang)))

    def gpu_sample(self) -> None:
        """One GPU sample of the job's GPUs every SV_GPU_EVERY_S (nothing without a GPU
        tool; the hang part remembers that)."""
        now = time.time()
        if self.hang_api is None or now - self.last_gpu < SV_GPU_EVERY_S:
            return
        self.last_gpu = now
        try:
            self.hang_api["gpu"](self.job_dir)
        except Exception as exc:  # a sample must never take the supervisor down
            self.event("gpu-sample-failed", why=repr(exc))

    def capture(self) -> None:
        if self.hang_api is None:
            return
        procs = [
            {"name": n, "rank": (p.get("ranks") or [None])[0], "pgid": self.local.pgids.get(n)}
            for n, p in self.local.procs.items()
            if n not in self.local.ended
        ]
        try:
            result = self.hang_api["capture"](self.job_dir, procs)
        except Exception as exc:  # a capture must never take the supervisor down
            self.event("capture-failed", why=repr(exc))
            return
        captured = list((result or {}).get("captured") or [])
        self.event("capture", captured=captured)
        if self.hang is not None:
            self.hang["captured"] = self.hang["captured"] + captured
        elif not self.is_leader and captured:
            # The leader's record is the job's truth: it lists every host's captures.
            self.send_leader({"type": "captured", "captured": captured})
        self.dirty = True


def sv_hang_api() -> dict[str, Callable[..., Any]] | None:
    """hang_capture.py's functions when that part precedes this one in the source."""
    names = {"progress": "hang_last_progress", "capture": "hang_capture", "gpu": "hang_gpu_sample"}
    found = {key: globals().get(name) for key, name in names.items()}
    if not all(callable(f) for f in found.values()):
        return None
    return found  # type: ignore[return-value]
