"""Issue 23 item 11: a Ray driver started with ``ray.init(log_to_driver=False)`` prints
nothing while its tasks work, so its own output never grows; the hang watch must count
the workers' output (``worker-*.out/err`` in each node's Ray logs, where Ray also marks
each task's start) as progress, on the head and on the other nodes. Real Ray (2.60) on
two real sshd hosts, a hang timeout shorter than each task with --stop-on-hang: a hang
read here stops the job. ~1.5 min."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_ray import assert_no_ray_left, dc, launch, remove_temp_dirs
from tests.integration.test_supervisor import job_dir

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

# Above the longest silence of a job that is not hung: while the cluster forms and the
# driver starts, the nodes' `ray start` output and the Ray workers' log files (made as
# each worker starts) move. Measured here, polling the supervisor's own progress rule
# (hang_last_progress) on both hosts every 0.2 s through a whole run with the driver
# below: at most 4.2 s without progress, at the start, on a machine busy with other
# sshd/torchrun tests; but 15.5 s once in CI, the other xdist worker running the
# compute-bound slow-rank jobs beside it (both cores taken). 30 s leaves 2x that.
HANG_TIMEOUT_S = 30
# Each node's task works (and prints) this long, well past the hang timeout: were that
# node's workers' output not counted, the driver's silence alone would read as a hang.
PHASE_S = HANG_TIMEOUT_S + 6

# One task on the head's node, then one on the other node, each printing once a second;
# the driver itself prints nothing between the start and the end.
DRIVER = f"""
import os, time
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init(log_to_driver=False, logging_level="ERROR")
head = ray.get_runtime_context().get_node_id()
other = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != head)

@ray.remote(num_cpus=0)
def work(where):
    for second in range({PHASE_S}):
        print(f"{{where}} working, second {{second}}", flush=True)
        time.sleep(1)
    return where

for where, node in (("head", head), ("other", other)):
    strategy = NodeAffinitySchedulingStrategy(node, soft=False)
    ray.get(work.options(scheduling_strategy=strategy).remote(where))
print("driver done", flush=True)
"""


@pytest.fixture
def driver() -> Iterator[Path]:
    """The driver where every host user can read it."""
    folder = Path(tempfile.mkdtemp(prefix="dc-rayhang-", dir="/tmp"))
    folder.chmod(0o755)
    path = folder / "quiet_driver.py"
    path.write_text(DRIVER)
    path.chmod(0o644)
    yield path
    path.unlink()
    folder.rmdir()


def test_a_quiet_ray_driver_whose_tasks_print_is_not_hung(sshd_cluster, tmp_path, driver) -> None:
    cluster = sshd_cluster(n=2)
    result = launch(
        tmp_path, cluster, "--hang-timeout", str(HANG_TIMEOUT_S), "--stop-on-hang",
        "--", str(driver),
    )  # fmt: skip
    jobs = dc(tmp_path, "jobs", str(cluster.inventory_path), "--json")
    [job] = json.loads(jobs.stdout)
    try:
        head_dir = job_dir(cluster, "node0", job["id"])
        record = json.loads((head_dir / "supervisor.json").read_text())
        assert record.get("hang") is None, (record, result.stderr[-2000:])
        assert result.returncode == 0, result.stderr[-3000:]
        assert job["state"] == "succeeded"
        assert "driver done" in (head_dir / "driver-0.out").read_text()
        assert_no_ray_left(cluster)
    finally:
        remove_temp_dirs(cluster, job["id"])
