"""The jobs gc on a host (standard library only) names a Ray job's temp dir as the Ray
planner does, and reads durations as ``gc --older-than`` documents them."""

from __future__ import annotations

import argparse

import pytest

from console.commands.gc import duration
from console.hostprogs import jobs_gc
from console.jobs.plan import ray


def test_ray_temp_dir_named_as_the_planner_names_it() -> None:
    for job_id, host in (("r-20260101-000000-abcdef", "node0"), ("x", "gpu-17.example")):
        assert jobs_gc.ray_dir(job_id, host) == ray.private_dir(job_id, host)


def test_durations() -> None:
    assert duration("30d") == 30 * 86400
    assert duration("12h") == 12 * 3600
    assert duration("0s") == 0
    assert duration("1d12h") == 36 * 3600
    assert duration("1.5h") == 5400
    for bad in ("", "soon", "30", "d", "-1d", "1d 2h"):
        with pytest.raises(argparse.ArgumentTypeError):
            duration(bad)
