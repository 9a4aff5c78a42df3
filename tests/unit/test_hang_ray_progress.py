"""The hang watch's progress of a Ray job's processes counts the node's workers' output
(``worker-*.out/err`` behind the job directory's ``ray-tmp`` link: a driver started with
``ray.init(log_to_driver=False)`` prints nothing while its tasks work), not Ray's own
logs, which print event statistics every minute hung or not (issue 23 item 11)."""

from __future__ import annotations

import os
from pathlib import Path

from console.hostprogs.supervisor.hang_capture import hang_last_progress


def touch(path: Path, mtime: float, text: str = "x\n") -> None:
    path.write_text(text)
    os.utime(path, (mtime, mtime))


def test_ray_workers_output_is_progress_and_rays_own_logs_are_not(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    touch(job / "driver-0.sh", 1000.0)
    touch(job / "driver-0.out", 1010.0)
    logs = tmp_path / "dcray-abc" / "t" / "session_1" / "logs"
    logs.mkdir(parents=True)
    (tmp_path / "dcray-abc" / "t" / "session_latest").symlink_to(logs.parent)
    (job / "ray-tmp").symlink_to(tmp_path / "dcray-abc" / "t")
    for name in ("raylet.out", "gcs_server.out", "python-core-worker-ab_7.log"):
        touch(logs / name, 5000.0)  # event statistics, hung or not
    assert hang_last_progress(str(job), ["driver-0"]) == 1010.0
    touch(logs / "worker-ab-01000000-7.out", 1500.0, ":task_name:work\nstep 3\n")
    touch(logs / "worker-ab-01000000-7.err", 1400.0)
    assert hang_last_progress(str(job), ["driver-0"]) == 1500.0
    assert hang_last_progress(str(job), []) == 0.0  # no live process here: nothing


def test_without_ray_nothing_changes(tmp_path: Path) -> None:
    touch(tmp_path / "torchrun-0.pgid", 1000.0)
    touch(tmp_path / "torchrun-0.err", 1200.0)
    assert hang_last_progress(str(tmp_path), ["torchrun-0"]) == 1200.0
