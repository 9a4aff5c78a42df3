"""One streaming sampler per host, and the cluster-wide stream of their updates.

:class:`HostMonitor` keeps one long-lived sampler running on its host over the pool's
connection: it starts it when the host is up, reads its JSON lines, and starts it again
after a reconnect. :class:`ClusterMonitor` runs one per host and hands consumers
BATCHES (``dict`` host -> :class:`HostView`), so a UI redraws once per batch rather
than once per line. A host that goes down keeps its last sample, marked stale with
when it was last seen; the other hosts keep updating.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType

from console.probe.host_monitor import HostMonitor
from console.probe.models import HostView
from console.probe.srun_sampler import SlurmJobOnNode, SrunNodeMonitor, srun_targets
from console.transport.base import HostState
from console.transport.pool import ClusterConnections


class ClusterMonitor:
    """``async with ClusterMonitor(pool) as monitor: async for batch in monitor.updates():``.

    The pool belongs to the caller (it is started here if it was not, never closed).
    """

    def __init__(
        self,
        pool: ClusterConnections,
        *,
        interval: float = 1.0,
        batch_window: float | None = None,
        stale_after: float | None = None,
        once: bool = False,
        health: bool = True,
    ) -> None:
        """``once``: every host's sampler writes one sample and exits (a snapshot:
        ``distconsole gpus`` without ``--watch``); ``health``: False where nothing reads
        the GPUs' health from the samples; see :class:`HostMonitor`."""
        if interval <= 0:
            raise ValueError("interval must be greater than 0")
        self.pool = pool
        self.interval = interval
        # Steady batches: at most two per interval (each one a UI repaint: at 64 hosts
        # going from 0.25 to 0.5 s took the console's CPU from ~6-7.7 to ~5.3-6.1 %).
        # Until every host has shown something, a shorter window: the first frame waits
        # on the slowest host, not on the window.
        self.batch_window = min(0.5, interval / 2) if batch_window is None else batch_window
        self.first_window = min(0.1, self.batch_window)
        self.stale_after = max(5.0, 3 * interval) if stale_after is None else stale_after
        self.monitors: dict[str, HostMonitor] = {
            host.name: HostMonitor(
                pool[host.name], interval=interval, publish=self._from_ssh, once=once, health=health
            )
            for host in pool.hosts
        }
        # Slurm nodes sampled through a job step instead (srun_sampler.py), by view name.
        self.srun: dict[str, tuple[SrunNodeMonitor, asyncio.Task[None]]] = {}
        self._slurm: Mapping[str, Sequence[SlurmJobOnNode]] = {}
        self._login: str | None = None
        self._queues: list[tuple[dict[str, HostView], asyncio.Event]] = []
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        if self._tasks:
            return
        await self.pool.start()
        self._tasks.append(asyncio.create_task(self._follow_pool(), name="monitor:pool"))
        self._tasks.append(asyncio.create_task(self._watch_silence(), name="monitor:silence"))
        for name, monitor in self.monitors.items():
            self._tasks.append(asyncio.create_task(monitor.run(), name=f"monitor:{name}"))

    async def close(self) -> None:
        for monitor in self.monitors.values():
            monitor.stop()
        for srun, task in self.srun.values():
            srun.stop()
            self._tasks.append(task)
        self.srun.clear()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def __aenter__(self) -> ClusterMonitor:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- reading -------------------------------------------------------------------------

    def views(self) -> dict[str, HostView]:
        """Every host's current view, in inventory order."""
        views = {name: m.view for name, m in self.monitors.items()}
        views.update((name, srun.view) for name, (srun, _task) in self.srun.items())
        return views

    # -- Slurm nodes through srun -------------------------------------------------------

    def follow_slurm(self, occupancy: Mapping[str, Sequence[SlurmJobOnNode]], login: str) -> None:
        """The Slurm occupancy changed (``SlurmQueuePoller``: jobs keyed by inventory
        host, else by node; ``login``: the inventory's login host). Samples through
        ``srun --overlap`` each node that is not up over SSH and holds one of the
        console user's running jobs, and stops where the job left the node."""
        self._slurm, self._login = occupancy, login
        self._sync_srun()

    def _sync_srun(self) -> None:
        if self._login is None or self._login not in self.monitors:
            return
        reachable = {n for n, m in self.monitors.items() if m.connection.status.is_up}
        targets = srun_targets(self._slurm, reachable)
        for name, (srun, task) in list(self.srun.items()):
            if targets.get(name) != (srun.node, srun.slurm_id):
                srun.stop()
                task.cancel()
                del self.srun[name]
                host = self.monitors.get(name)
                if host is not None:
                    self._publish(host.view)  # back to what SSH says of it
                else:
                    self._publish(HostView(name, HostState.DOWN, "job left the node; not sampled"))
        login = self.pool[self._login]
        for name, (node, slurm_id) in targets.items():
            if name in self.srun:
                continue
            srun = SrunNodeMonitor(
                login, name, node, slurm_id, interval=self.interval, publish=self._publish
            )
            task = asyncio.create_task(srun.run(), name=f"monitor:srun:{name}")
            self.srun[name] = (srun, task)
            self._publish(srun.view)

    async def first_frame(self, timeout: float | None = None) -> dict[str, HostView]:
        """Wait until every host has a sample with its host figures (a streaming
        sampler's second line, 0.1 s after its first; a one-shot sampler's only line)
        or is known not to give one (at most ``timeout``, default: the pool's settle
        time plus a few intervals)."""
        await self.start()
        limit = self.pool.settle_timeout() + 3 * self.interval + 5 if timeout is None else timeout
        deadline = time.monotonic() + limit
        while not all(m.settled for m in self.monitors.values()):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):  # not wait_for: see HostMonitor._woken_or
                    await self._changed.wait()
        return self.views()

    async def updates(self) -> AsyncIterator[dict[str, HostView]]:
        """All hosts first, then batches of the hosts that changed (at most one batch
        per ``first_window`` until every host has settled, then per ``batch_window``)."""
        await self.start()
        pending: dict[str, HostView] = {}
        event = asyncio.Event()
        entry = (pending, event)
        self._queues.append(entry)
        try:
            yield self.views()
            settled = False
            while True:
                await event.wait()
                settled = settled or all(m.settled for m in self.monitors.values())
                await asyncio.sleep(self.batch_window if settled else self.first_window)
                event.clear()
                batch = dict(pending)
                pending.clear()
                if batch:
                    yield batch
        finally:
            self._queues.remove(entry)

    # -- internals -----------------------------------------------------------------------

    def _from_ssh(self, view: HostView) -> None:
        if view.name not in self.srun:  # while srun samples it, its views are srun's
            self._publish(view)

    def _publish(self, view: HostView) -> None:
        for pending, event in self._queues:
            pending[view.name] = view
            event.set()
        self._changed.set()

    async def _follow_pool(self) -> None:
        async for status in self.pool.subscribe():
            monitor = self.monitors.get(status.name)
            if monitor is not None:
                monitor.on_status(status)
                if self._login is not None:
                    self._sync_srun()  # a host going down may now be sampled through srun

    async def _watch_silence(self) -> None:
        while True:
            await asyncio.sleep(max(self.interval, 1.0))
            now = time.time()
            for monitor in self.monitors.values():
                monitor.mark_silent(now, self.stale_after)
