"""Sampling a Slurm compute node's GPUs through the login host, for nodes the console
cannot reach over SSH: the sampler host program runs as a step of a running job,

    srun --overlap --jobid J -w NODE --nodes 1 --ntasks 1 python3 -u - ARGS

on the login host, its source on srun's stdin (srun forwards stdin to the task), so it
sees the GPUs that job holds (``--overlap``: the step shares the job's resources with
the steps already running instead of waiting for free ones). The lines that come back
are the sampler's own (hello, then one JSON sample per interval), read by the same
:class:`~console.probe.sampler.SampleReader` as over SSH.

Only the job's owner (or root) may add a step to it, so this samples the console
user's own jobs; other users' nodes show their Slurm jobs without figures.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from console.errors import TransportError
from console.hostprogs.sampler import program as sampler_program
from console.inventory import Host
from console.probe.models import HostSample, HostView
from console.probe.sampler import SampleReader, program_source
from console.transport.base import HostConnection, HostState, RemoteProcess
from console.transport.ship import HostProgram, Shipment, python_command, shell_join, with_setup
from console.transport.streams import stderr_summary

SAMPLE_TIMEOUT_S = 60.0  # srun's step start waits on slurmctld and the node's slurmd
MAX_RETRY_S = 30.0


def srun_argv(slurm_id: str, node: str) -> list[str]:
    """srun's words that run one task on ``node`` inside job ``slurm_id``."""
    return ["srun", "--overlap", "--jobid", slurm_id, "-w", node, "--nodes", "1", "--ntasks", "1"]


def srun_sampler_shipment(
    login: Host, slurm_id: str, node: str, interval: float, *, python: str = "python3"
) -> Shipment:
    """The login host's command line and stdin that run the sampler on ``node``.

    ``exec``: srun replaces the login shell, so closing the session ends the step (srun
    cancels its step when it loses its own stdin/stdout)."""
    program = HostProgram(
        sampler_program.PROGRAM, program_source(), (f"{interval:g}", "auto", "0", node)
    )
    command = f"exec {shell_join(srun_argv(slurm_id, node))} {python_command(python, program)}"
    return Shipment(with_setup(login.setup, command), program.source)


async def sample_through_srun(
    login: HostConnection,
    slurm_id: str,
    node: str,
    *,
    interval: float = 1.0,
    timeout: float = SAMPLE_TIMEOUT_S,
) -> HostSample:
    """One sample of ``node``'s GPUs taken by a step of job ``slurm_id``, started over
    the login host's connection; the step is ended once the sample is in.

    Raises TimeoutError when none comes within ``timeout``, RuntimeError when the step
    ends first (srun's stderr in the message: not the job's owner, job ended, ...)."""
    shipment = srun_sampler_shipment(login.host, slurm_id, node, interval)
    process = await login.start(shipment.command)
    try:
        await process.write(shipment.stdin)
        process.write_eof()
        reader = SampleReader(node)

        async def first() -> HostSample | None:
            async for line in process.lines():
                if not line.strip().startswith("{"):
                    continue  # a setup line's own output
                sample = reader.read(line)
                if sample is not None:
                    return sample
            return None

        sample = await asyncio.wait_for(first(), timeout)
        if sample is None:
            status = await process.wait()
            raise RuntimeError(
                f"srun step on {node} of job {slurm_id} ended (status {status}) before a sample"
            )
        return sample
    finally:
        process.close()


class SlurmJobOnNode(Protocol):
    """What :func:`srun_targets` reads of ``console.jobs.slurm.queue.SlurmJobOnNode``
    (probe and jobs are sibling layers: neither imports the other)."""

    @property
    def slurm_id(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def mine(self) -> bool: ...
    @property
    def node(self) -> str: ...


def srun_targets(
    occupancy: Mapping[str, Sequence[SlurmJobOnNode]], reachable: Container[str]
) -> dict[str, tuple[str, str]]:
    """``{name: (node, slurm_id)}``: where to sample through srun. ``occupancy`` is
    keyed by inventory host (else by node); ``reachable``: the hosts sampled over SSH
    now. A node qualifies when it is not reachable and one of the console user's own
    RUNNING jobs holds it (only a job's owner may add a step); its lowest id is used."""
    targets: dict[str, tuple[str, str]] = {}
    for name, jobs in occupancy.items():
        if name in reachable:
            continue
        mine = [j for j in jobs if j.mine and j.state == "RUNNING"]
        if mine:
            targets[name] = (mine[0].node or name, mine[0].slurm_id)
    return targets


def via_srun(slurm_id: str) -> str:
    """The mark a node sampled through a job's step carries on the GPU screen."""
    return f"via srun (job {slurm_id})"


class SrunNodeMonitor:
    """Keeps one sampler running on a Slurm node as a step of one of the console user's
    jobs, over the login host's connection: :class:`~console.probe.host_monitor.HostMonitor`'s
    loop for a node the console cannot reach over SSH. Each sample is published as a
    :class:`HostView` named ``name`` (the node's inventory host, else the node) with
    :func:`via_srun` as its reason; a step that ends (job gone, srun refused) is retried
    with a back-off until :meth:`stop` (the job left the node)."""

    def __init__(
        self,
        login: HostConnection,
        name: str,
        node: str,
        slurm_id: str,
        *,
        interval: float,
        publish: Callable[[HostView], None],
    ) -> None:
        self.login = login
        self.name = name
        self.node = node
        self.slurm_id = slurm_id
        self.interval = interval
        self._publish = publish
        self.view = HostView(name, HostState.CONNECTING, via_srun(slurm_id))
        self._process: RemoteProcess | None = None
        self._stopped = False

    def _set(self, view: HostView) -> None:
        if view != self.view:
            self.view = view
            self._publish(view)

    async def run(self) -> None:
        retry = 1.0
        while not self._stopped:
            got_sample, detail = await self._run_once()
            if self._stopped:
                return
            view = self.view
            reason = via_srun(self.slurm_id) + (f": {detail}" if detail else "")
            self._set(replace(view, reason=reason, stale=view.sample is not None))
            retry = 1.0 if got_sample else min(retry * 2, MAX_RETRY_S)
            await asyncio.sleep(retry)

    async def _run_once(self) -> tuple[bool, str]:
        if not self.login.status.is_up:
            return False, f"login host {self.login.host.name} {self.login.status.state.value}"
        shipment = srun_sampler_shipment(self.login.host, self.slurm_id, self.node, self.interval)
        try:
            process = await self.login.start(shipment.command)
        except TransportError as exc:
            return False, str(exc)
        self._process = process
        got_sample = False
        error = ""
        try:
            await process.write(shipment.stdin)
            process.write_eof()
            reader = SampleReader(self.name)
            async for line in process.lines():
                if not line.strip().startswith("{"):
                    continue  # a setup line's own output, srun's notices
                try:
                    sample = reader.read(line)
                except ValueError as exc:
                    error = str(exc)
                    continue
                if sample is not None:
                    got_sample = True
                    self._set(HostView(self.name, HostState.UP, via_srun(self.slurm_id), sample))
        except TransportError as exc:
            error = str(exc)
        finally:
            process.close()
            self._process = None
        return got_sample, error or stderr_summary(process)

    def stop(self) -> None:
        self._stopped = True
        if self._process is not None:
            self._process.close()
