"""The session budget of one SSH connection: OpenSSH's sshd allows ``MaxSessions``
(10 by default) channels per connection and refuses the next one.

Everything the console does on a host shares that host's one connection: the GPU
sampler, log followers, job watches, pre-flight probes, launches, stops, reports. A
:class:`SessionLimiter` lets at most ``limit`` (8, below sshd's 10) channels be open at
once; more opens wait in line, first come first served, and get their channel as soon
as another session ends. Waiting is bounded: when nothing has ended for ``wait_s``
seconds the open fails with an error that says what holds the sessions (a session
kept open forever would otherwise stall every later command silently).
"""

from __future__ import annotations

import asyncio
import shlex
import time
from collections import deque
from dataclasses import dataclass, field

from console.errors import TransportError

# Below OpenSSH's default MaxSessions (10): leaves room for a second console (or a
# person's own ssh with ControlMaster) on the same connection's budget.
SESSIONS_PER_CONNECTION = 8
# How long an open may wait in line for a session before it fails with an error.
SESSION_WAIT_S = 60.0


class SessionsBusy(TransportError):
    """Every session of a connection stayed in use while an open waited for one."""


@dataclass(eq=False)
class SessionSlot:
    """One open channel's place in the budget; :meth:`release` gives it back (once)."""

    limiter: SessionLimiter
    command: str  # the command line (described only when an error needs it)
    since: float = field(default_factory=time.monotonic)
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.limiter._release(self)


class SessionLimiter:
    """At most ``limit`` sessions at once on one connection (see the module doc)."""

    def __init__(
        self,
        host: str,
        limit: int = SESSIONS_PER_CONNECTION,
        *,
        wait_s: float = SESSION_WAIT_S,
    ) -> None:
        if limit < 1:
            raise ValueError("a connection needs at least one session")
        self.host = host
        self.limit = limit
        self.wait_s = wait_s
        self._held: list[SessionSlot] = []
        self._waiters: deque[tuple[asyncio.Future[SessionSlot], str]] = deque()
        self._last_release = time.monotonic()
        self.peak = 0  # the most sessions held at once (what tests and benches read)
        self.queued = 0  # opens that had to wait for a session

    @property
    def in_use(self) -> int:
        return len(self._held)

    @property
    def waiting(self) -> int:
        return sum(1 for waiter, _ in self._waiters if not waiter.done())

    def _take(self, command: str) -> SessionSlot:
        slot = SessionSlot(self, command)
        self._held.append(slot)
        self.peak = max(self.peak, len(self._held))
        return slot

    async def acquire(self, command: str) -> SessionSlot:
        """A session for ``command``; waits in line while all are in use. Raises
        :class:`SessionsBusy` once ``wait_s`` seconds passed in which none was given
        back (a budget that stays full: something holds its sessions for good)."""
        if len(self._held) < self.limit and not self.waiting:
            return self._take(command)
        self.queued += 1
        waiter: asyncio.Future[SessionSlot] = asyncio.get_running_loop().create_future()
        self._waiters.append((waiter, command))
        queued_at = time.monotonic()
        try:
            while True:
                left = max(self._last_release, queued_at) + self.wait_s
                try:
                    async with asyncio.timeout(left - time.monotonic()):
                        return await asyncio.shield(waiter)
                except TimeoutError:
                    if time.monotonic() - self._last_release >= self.wait_s:
                        raise self._busy_error() from None
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                waiter.result().release()  # handed over as we gave up: pass it on
            else:
                waiter.cancel()
            raise
        finally:
            self._waiters = deque(w for w in self._waiters if w[0] is not waiter)

    def _release(self, slot: SessionSlot) -> None:
        if slot in self._held:
            self._held.remove(slot)
        self._last_release = time.monotonic()
        # Hand the freed place straight to the next in line, so a newcomer cannot
        # overtake a waiter (and the count never goes past the limit).
        while self._waiters and len(self._held) < self.limit:
            waiter, command = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(self._take(command))

    def describe_holders(self, now: float | None = None, most: int = 10) -> str:
        now = time.monotonic() if now is None else now
        longest = sorted(self._held, key=lambda s: s.since)[:most]
        return "; ".join(
            f"{describe_command(s.command)} (for {now - s.since:.0f} s)" for s in longest
        )

    def _busy_error(self) -> SessionsBusy:
        return SessionsBusy(
            f"{self.host}: all {self.limit} SSH sessions of this connection stayed in use "
            f"for {self.wait_s:g} s while another command waited (sshd allows 10 by "
            f"default, MaxSessions); held by: {self.describe_holders()}. Close what is "
            "not needed (log views, job watches), or raise MaxSessions in the host's "
            "sshd_config"
        )


def describe_command(line: str, width: int = 70) -> str:
    """A command line shortened for an error message: the job helper by its operation,
    anything else by its first words."""
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    if "-c" in words:
        at = words.index("-c")
        source = words[at + 1] if at + 1 < len(words) else ""
        if source.startswith("# distconsole job helper") and at + 2 < len(words):
            return f"jobctl {words[at + 2]}"
    flat = " ".join(w if len(w) < 40 else w[:37] + "…" for w in words)
    return flat if len(flat) <= width else flat[: width - 1] + "…"
