"""One streaming sampler kept running on one host (:class:`HostMonitor`).

It starts the sampler over the pool's connection when the host is up, reads its JSON
lines into a :class:`HostView`, falls back to an nvidia-smi loop where the host has no
python3, backs off after a failed start and starts it again after a reconnect. A host
that goes down keeps its last sample, marked stale. ``monitor.py``'s
:class:`~console.probe.monitor.ClusterMonitor` runs one per host.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from console.errors import TransportError
from console.probe import sampler
from console.probe.models import HostSample, HostView
from console.transport.base import HostConnection, HostState, HostStatus, RemoteProcess
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
        once: bool = False,
        health: bool = True,
    ) -> None:
        """``once``: one sample and done (``distconsole gpus``): the sampler is started
        with interval 0, writes one line whose CPU % and rates already have their window,
        and exits; nothing is restarted after it. ``health``: False when nothing reads the
        GPUs' health from these samples (``gpus``), so the sampler starts no health reader."""
        self.connection = connection
        self.host = connection.host
        self.interval = interval
        self.once = once
        self.health = health
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
        if self.once:
            return  # one sample, kept as it was taken: no line is expected after it
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
            if got_sample and self.once:
                return
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
        interval = 0.0 if self.once else self.interval
        if self.use_nvsmi_loop:
            command = sampler.nvsmi_loop_command(host, interval)
        else:
            command = sampler.sampler_command(host, interval, health=self.health)
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
                    # A run's second line, or later; a one-shot line has its window.
                    self.warm = self.warm or got_sample or self.once
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
        if rows and self.once:
            # One query, no loop: its rows are the whole tick (a loop's unfinished tick
            # at the end of a stream is not).
            yield sampler.decode_nvsmi_loop(self.host.name, rows)

    def stop(self) -> None:
        if self._process is not None:
            self._process.close()
