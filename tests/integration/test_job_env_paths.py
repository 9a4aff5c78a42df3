"""A job's own paths in its environment are real paths on the host each rank runs on
(issue 29 item 6), on real sshd hosts with a user and home per host.

``DISTCONSOLE_JOB_DIR`` was exported as ``'~/…'`` (quoted: the tilde never expanded,
``os.path.isdir`` false in the rank), and mpirun forwarded the launcher host's
``DISTCONSOLE_HANG_HOOK`` (``/home/<launcher user>/…``) to the rank on node1.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from sshd_cluster import SshdCluster

from console.jobs.models import JobState
from console.jobs.spec import make_spec
from tests.integration.test_mpi_per_host import runner_for

pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.mpi]

JOB_TIMEOUT_S = 90
PATH_VARS = ("DISTCONSOLE_JOB_DIR", "DISTCONSOLE_HANG_HOOK", "DISTCONSOLE_CHECKPOINT_DIR")

# One write (os.write): what each rank sees of its paths, as JSON.
PATHS = """\
import json, os
seen = {"rank": int(os.environ["OMPI_COMM_WORLD_RANK"]), "home": os.path.expanduser("~")}
for name in NAMES:
    value = os.environ.get(name, "")
    seen[name] = [value, os.path.isdir(value)]
os.write(1, (json.dumps(seen) + "\\n").encode())
""".replace("NAMES", repr(PATH_VARS))


async def test_each_mpi_rank_gets_its_own_hosts_job_paths_expanded(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=2)
    assert cluster.hosts[0].home != cluster.hosts[1].home
    cluster.write_inventory(interface="lo")
    for host in cluster.hosts:
        script = host.home / "paths.py"
        script.write_text(PATHS)
        script.chmod(0o644)
    data = tmp_path / "data"
    data.mkdir()
    async with runner_for(cluster, data) as runner:
        spec = make_spec(kind="mpi", program="~/paths.py", gpus_per_host=1)
        plan = await runner.prepare(spec)
        job = await runner.launch(plan)
        state = await asyncio.wait_for(job.wait(), JOB_TIMEOUT_S)
        assert state is JobState.SUCCEEDED, job.failure and job.failure.describe()
    seen = {}
    for log in plan.launches[0].log_paths:
        if log.role == "rank" and log.stream == "stdout":
            assert log.host is not None
            host = cluster.host(log.host)
            seen[log.rank] = (
                host,
                json.loads((host.home / log.path.removeprefix("~/")).read_text()),
            )
    assert sorted(seen) == [0, 1]
    wrong = []  # every rank's every path, so a failure names all that is wrong
    for rank, (host, paths) in seen.items():
        job_dir = f"{host.home}/distconsole/.distconsole/jobs/{plan.job_id}"
        assert paths["home"] == str(host.home), (rank, paths)
        expected = {
            "DISTCONSOLE_JOB_DIR": [job_dir, True],
            "DISTCONSOLE_HANG_HOOK": [f"{job_dir}/python", True],
            "DISTCONSOLE_CHECKPOINT_DIR": [f"{job_dir}/checkpoints", True],
        }
        wrong += [(rank, k, paths[k], v) for k, v in expected.items() if paths[k] != v]
    assert wrong == []
