"""The GPU screen's Slurm parts against a real Slurm cluster (tests/slurm_cluster.py:
munged, slurmctld, slurmd n1 and n2) whose login host is a real sshd test host: the
squeue poller sees a job the test user submitted, on its node, with its user; and one
GPU sample comes back from that node through ``srun --overlap --jobid`` (the sampler
host program as a step of the job, the GPU STAND-IN ``tests/standin/nvidia-smi`` on the
step's PATH: there is no GPU here)."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))

from slurm_cluster import SlurmCluster, slurm_with_login, unavailable_reason
from sshd_cluster import unavailable_reason as sshd_unavailable

from console.inventory import Inventory
from console.jobs.slurm.queue import SlurmJobOnNode, SlurmQueuePoller
from console.probe.srun_sampler import sample_through_srun
from console.transport.pool import ClusterConnections

WAIT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SlurmCluster, Inventory]]:
    """One Slurm cluster and one sshd login host (the stand-in on its PATH)."""
    reason = unavailable_reason() or sshd_unavailable()
    if reason is not None:
        pytest.skip(reason)
    with slurm_with_login(tmp_path_factory.mktemp("slurm-gpu")) as made:
        yield made


async def test_poller_shows_the_job_on_its_node_and_srun_samples_its_gpu(
    cluster: tuple[SlurmCluster, Inventory],
) -> None:
    slurm, inventory = cluster
    login = inventory.hosts[0]
    pool = ClusterConnections(inventory)
    await pool.wait_settled()
    conn = pool[login.name]
    slurm_id = ""
    try:
        submit = await conn.run(
            f"{login.setup} && sbatch --parsable -N 1 -w n1 --gres=gpu:1 -J gpuscreen "
            "-o /dev/null --wrap 'sleep 30'"
        )
        assert submit.exit_status == 0, submit.stderr
        slurm_id = submit.stdout.strip().partition(";")[0]

        poller = SlurmQueuePoller(pool, inventory, poll_s=0.5)
        seen: tuple[SlurmJobOnNode, ...] = ()
        deadline = time.monotonic() + WAIT_S
        async for occupancy in poller.updates():
            seen = tuple(j for j in occupancy.get("n1", ()) if j.slurm_id == slurm_id)
            if seen and seen[0].state == "RUNNING":
                break
            assert time.monotonic() < deadline, f"job {slurm_id} never ran on n1: {occupancy}"
        [job] = seen
        assert (job.user, job.name, job.gpus, job.gpu_indices) == (login.user, "gpuscreen", 1, (0,))
        assert job.mine and job.label == f"slurm {slurm_id} {login.user} gpuscreen (yours)"
        assert poller.me == login.user

        sample = await sample_through_srun(conn, slurm_id, "n1", timeout=WAIT_S)
        assert sample.name == "n1" and sample.gpu_source.startswith("nvidia-smi")
        # the stand-in replays a captured 1 x H200 nvidia-smi
        assert [g.name for g in sample.gpus] == ["NVIDIA H200"]
        # The step ran inside the job on n1 (Slurm's own variables in its environment
        # are not sent back; the step's record in the slurmd log is).
        assert f"{slurm_id}.0" in slurm.log_tail("slurmd-n1", lines=200)
    finally:
        if slurm_id:
            await conn.run(f"{login.setup} && scancel {slurm_id}")
        await pool.close()
    deadline = time.monotonic() + WAIT_S
    while slurm.job_processes(slurm_id):  # scancel leaves nothing behind
        assert time.monotonic() < deadline, slurm.job_processes(slurm_id)
        await asyncio.sleep(0.2)
