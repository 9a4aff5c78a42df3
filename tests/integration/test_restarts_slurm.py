"""--max-restarts under ``launch --scheduler slurm`` on the real Slurm cluster
(``tests/slurm_cluster.py``): torchrun's restarts inside the allocation, the checkpoints
in the submit directory, ``--requeue`` in the batch script."""

from __future__ import annotations

import re

import pytest

from tests.integration.test_slurm_jobs import Env, slurm, submitted

pytestmark = [pytest.mark.slow]

__all__ = ["slurm"]  # the cluster fixture, shared with test_slurm_jobs.py


def test_ddp_restarts_inside_the_allocation_and_resumes(slurm: Env) -> None:
    done = slurm.launch(
        "--nodes", "2", "--gpus-per-host", "1", "--max-restarts", "1",
        program=("example:ddp", "--steps", "60", "--crash-rank", "1", "--crash-at-step",
                 "30", "--crash-once"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    job = slurm.job(submitted(done))
    assert job["state"] == "succeeded", job
    resumed = dict(re.findall(r"rank (\d) resumed from step (\d+)", done.stdout))
    assert resumed == {"0": "25", "1": "25"}, done.stdout[-3000:]
    assert len(re.findall(r"rank \d params_checksum=", done.stdout)) == 2
