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
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import replace
from types import TracebackType

from console.errors import TransportError
from console.probe import sampler
from console.probe.models import HostSample, HostView
from console.probe.srun_sampler import SlurmJobOnNode, SrunNodeMonitor, srun_targets
from console.transport.base import HostConnection, HostState, HostStatus, RemoteProcess
from console.transport.pool import ClusterConnections
from console.transport.streams import stderr_summary

COMMAND_NOT_FOUND = 127
MAX_RETRY_S = 30.0


async def _exit_status(process: RemoteProcess) -> int | None:
    with contextlib.suppress(TimeoutError):
        return await asyncio.wait_for(process.wait(), 5)
    return None


def _stderr_tail(process: RemoteProcess) -> str:
    return stderr_summary(process)


class HostMonitor:
    """Keeps one sampler running on one host; publishes a :class:`HostView` per change."""

    def __init__(
        self,
        connection: HostConnection,
        *,
        interval: float,
        publish: Callable[[HostView], None],
    ) -> None:
        self.connection = connection
        self.host = connection.host
        self.interval = interval
        self._publish = publish
        status = connection.status
        self.view = HostView(self.host.name, status.state, status.reason)
        self.failed_once = False  # a start that produced no sample (for first-frame waits)
        # A sampler's first line comes before CPU % and throughput can be read; its second
        # line (0.1 s on) has them. The nvidia-smi loop has no host figures to wait for.
        self.warm = False
        self.use_nvsmi_loop = False  # no python3 on the host
        self._wake = asyncio.Event()
        self._process: RemoteProcess | None = None
        self._connection_state = (status.state, status.reason)

    # -- state ---------------------------------------------------------------------------

    def _set(self, view: HostView) -> None:
        if view != self.view:
            self.view = view
            self._publish(view)

    def on_status(self, status: HostStatus) -> None:
        """The pool says the connection changed state."""
        if (status.state, status.reason) == self._connection_state:
            # The same state announced again (a figure such as latency changed): waking
            # the sampler loop here would clear a failed sampler's reason and retry it at
            # once instead of after its back-off.
            return
        self._connection_state = (status.state, status.reason)
        view = self.view
        if status.is_up:
            self._set(replace(view, state=status.state, reason=""))
        else:
            last = status.last_seen or (view.sample.time if view.sample else None)
            self._set(
                replace(
                    view,
                    state=status.state,
                    reason=status.reason,
                    stale=view.sample is not None,
                    last_seen=last if last is not None else view.last_seen,
                )
            )
        self._wake.set()

    def mark_silent(self, now: float, after: float) -> None:
        """No line for ``after`` seconds although the connection looks up: stale."""
        sample = self.view.sample
        if sample is not None and not self.view.stale and now - sample.time > after:
            silent = f"no sample for {now - sample.time:.0f}s"
            self._set(replace(self.view, stale=True, reason=silent))

    @property
    def settled(self) -> bool:
        """Has something to show: a sample with its host figures, a failure, or a host that
        is not coming up."""
        v = self.view
        return (
            (v.sample is not None and (self.warm or v.stale))
            or self.failed_once
            or v.state
            not in (
                HostState.UP,
                HostState.CONNECTING,
            )
        )

    # -- running -------------------------------------------------------------------------

    async def run(self) -> None:
        retry = 1.0
        while True:
            if not self.connection.status.is_up:
                self._wake.clear()
                if not self.connection.status.is_up:
                    await self._wake.wait()
                continue
            got_sample, exit_status, detail = await self._run_once()
            if got_sample:
                # The stream ended (connection lost, or the sampler died): the last sample
                # is stale now. Restart promptly, but never in a tight loop.
                retry = 1.0
                if self.view.sample is not None and not self.view.stale:
                    self._set(replace(self.view, stale=True))
                await self._woken_or(min(1.0, self.interval))
                continue
            if exit_status == COMMAND_NOT_FOUND and not self.use_nvsmi_loop:
                self.use_nvsmi_loop = True
                continue
            self.failed_once = True
            if self.connection.status.is_up:
                what = f"sampler exited (status {exit_status})" if exit_status is not None else ""
                reason = "; ".join(x for x in (what or "sampler stopped", detail) if x)
                self._set(replace(self.view, reason=reason, stale=self.view.sample is not None))
            await self._woken_or(retry)
            retry = min(retry * 2, MAX_RETRY_S)

    async def _woken_or(self, seconds: float) -> None:
        """Sleep until woken (a connection change) or ``seconds`` pass.

        ``asyncio.timeout``, not ``wait_for``: on Python 3.11 ``wait_for`` swallows a
        cancel that arrives as the event is set (an unchanged status woke it just as
        the console closed), and the monitor then slept on instead of ending.
        """
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()

    async def _run_once(self) -> tuple[bool, int | None, str]:
        host = self.host
        if self.use_nvsmi_loop:
            command = sampler.nvsmi_loop_command(host, self.interval)
        else:
            command = sampler.sampler_command(host, self.interval)
        try:
            process = await self.connection.start(command)
        except TransportError as exc:
            return False, None, str(exc)
        self._process = process
        got_sample = False
        error = ""
        try:
            try:
                if not self.use_nvsmi_loop:
                    await process.write(sampler.program_source())
                process.write_eof()
            except TransportError as exc:
                # It ended before its program was written (the setup line failed, no
                # python3): its exit status and stderr say why, and 127 means the
                # nvidia-smi loop is worth a try.
                status = await _exit_status(process)
                return False, status, _stderr_tail(process) or str(exc)
            lines = process.lines()
            if self.use_nvsmi_loop:
                async for sample in self._loop_samples(lines):
                    got_sample = self.warm = True
                    self._accept(sample)
            else:
                reader = sampler.SampleReader(host.name)
                async for line in lines:
                    try:
                        read = reader.read(line)
                    except ValueError as exc:
                        error = str(exc)
                        continue
                    if read is None:
                        continue  # the sampler's hello
                    self.warm = self.warm or got_sample  # a run's second line, or later
                    got_sample = True
                    self._accept(read)
            exit_status = await _exit_status(process)
        except TransportError as exc:
            return got_sample, None, str(exc)
        finally:
            process.close()
            self._process = None
        return got_sample, exit_status, error or _stderr_tail(process)

    def _accept(self, sample: HostSample) -> None:
        self._set(HostView(self.host.name, HostState.UP, "", sample, False, sample.time))

    async def _loop_samples(self, lines: AsyncIterator[str]) -> AsyncIterator[HostSample]:
        """Group ``nvidia-smi -lms`` rows into ticks: the index wraps at each new tick."""
        rows: list[str] = []
        last_index = -1
        count: int | None = None
        async for line in lines:
            head = line.split(",", 1)[0].strip()
            if not head.isdigit():
                yield sampler.decode_nvsmi_loop(self.host.name, [line])
                continue
            index = int(head)
            if index <= last_index and rows:
                count = len(rows)
                yield sampler.decode_nvsmi_loop(self.host.name, rows)
                rows = []
            rows.append(line)
            last_index = index
            if count is not None and len(rows) == count:
                yield sampler.decode_nvsmi_loop(self.host.name, rows)
                rows, last_index = [], -1

    def stop(self) -> None:
        if self._process is not None:
            self._process.close()


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
    ) -> None:
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
            host.name: HostMonitor(pool[host.name], interval=interval, publish=self._from_ssh)
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
        """Wait until every host has a sample with its host figures (a sampler's second
        line, 0.1 s after its first) or is known not to give one (at most
        ``timeout``, default: the pool's settle time plus a few intervals)."""
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
