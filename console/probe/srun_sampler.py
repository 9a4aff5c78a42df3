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

from console.hostprogs import sampler_program
from console.hostprogs.ship import HostProgram, Shipment, python_command, shell_join, with_setup
from console.inventory import Host
from console.probe.models import HostSample
from console.probe.sampler import SampleReader, program_source
from console.transport.base import HostConnection

SAMPLE_TIMEOUT_S = 60.0  # srun's step start waits on slurmctld and the node's slurmd


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
