"""The GPU monitor samples a Slurm compute node that has no SSH host through
``srun --overlap --jobid`` while one of the console user's jobs runs there, and stops
once the job has left it: a real Slurm cluster (tests/slurm_cluster.py: munged,
slurmctld, slurmd n1 and n2), the real squeue poller on a real sshd login host, the
real ClusterMonitor. The inventory holds the login host only, so n1 is reachable through
Slurm alone. There is no GPU here: the GPU STAND-IN ``tests/standin/nvidia-smi`` is on
the login host's PATH, which srun hands to the step."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))

from slurm_cluster import SlurmCluster, slurm_with_login, unavailable_reason
from sshd_cluster import unavailable_reason as sshd_unavailable

from console.inventory import Inventory
from console.jobs.slurm.queue import SlurmQueuePoller
from console.probe.models import HostView
from console.probe.monitor import ClusterMonitor
from console.transport.base import HostState
from console.transport.pool import ClusterConnections

WAIT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SlurmCluster, Inventory]]:
    """One Slurm cluster and one sshd login host (the stand-in on its PATH)."""
    reason = unavailable_reason() or sshd_unavailable()
    if reason is not None:
        pytest.skip(reason)
    with slurm_with_login(tmp_path_factory.mktemp("slurm-srun")) as made:
        yield made


async def test_a_node_without_ssh_is_sampled_through_srun_while_my_job_runs(
    cluster: tuple[SlurmCluster, Inventory],
) -> None:
    slurm, inventory = cluster
    login = inventory.hosts[0]
    assert "n1" not in {h.name for h in inventory.hosts}  # Slurm's node, not an SSH host
    pool = ClusterConnections(inventory)
    await pool.wait_settled()
    conn = pool[login.name]
    monitor = ClusterMonitor(pool, interval=0.5)
    poller = SlurmQueuePoller(pool, inventory, poll_s=0.5)

    async def feed() -> None:
        async for occupancy in poller.updates():
            monitor.follow_slurm(occupancy, login.name)

    feeder = asyncio.create_task(feed())
    slurm_id = ""
    try:
        submit = await conn.run(
            f"{login.setup} && sbatch --parsable -N 1 -w n1 --gres=gpu:1 -J srunmon "
            "-o /dev/null --wrap 'sleep 60'"
        )
        assert submit.exit_status == 0, submit.stderr
        slurm_id = submit.stdout.strip().partition(";")[0]

        async def n1_until(wanted: str) -> HostView:
            deadline = time.monotonic() + WAIT_S
            async for batch in monitor.updates():
                view = batch.get("n1")
                if view is not None and (
                    (wanted == "sampled" and view.live and view.sample is not None)
                    or (wanted == "released" and view.state is HostState.DOWN)
                ):
                    return view
                assert time.monotonic() < deadline, f"n1 never {wanted}: {monitor.views()}"
            raise AssertionError("the monitor's updates ended")

        view = await n1_until("sampled")
        assert view.reason == f"via srun (job {slurm_id})"
        assert view.sample is not None and view.sample.name == "n1"
        # the stand-in replays a captured 1 x H200 nvidia-smi, from the step on n1
        assert [g.name for g in view.sample.gpus] == ["NVIDIA H200"]
        srun, _task = monitor.srun["n1"]
        assert (srun.node, srun.slurm_id) == ("n1", slurm_id)
        assert f"{slurm_id}.0" in slurm.log_tail("slurmd-n1", lines=200)  # a step of the job

        await conn.run(f"{login.setup} && scancel {slurm_id}")
        view = await n1_until("released")
        assert view.reason == "job left the node; not sampled" and "n1" not in monitor.srun
    finally:
        feeder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await feeder
        await monitor.close()
        if slurm_id:
            await conn.run(f"{login.setup} && scancel {slurm_id}")
        await pool.close()
    deadline = time.monotonic() + WAIT_S
    while slurm.job_processes(slurm_id):  # neither the job nor the sampler step is left
        assert time.monotonic() < deadline, slurm.job_processes(slurm_id)
        await asyncio.sleep(0.2)
