"""horovodrun --gloo starts every rank as ``env NAME=VALUE ... COMMAND``, the whole
launcher environment in its ssh's and shells' argv: the job's ``--env`` values travel
in a 0600 file per host instead (``jobs/plan/mpi_secrets.py``). Real horovodrun on two
real sshd hosts; the ``nobody`` account scans every ``/proc/*/cmdline`` while the ranks
run (issue 29 item 5). The inventory's ``env`` (a value per host) travels the same way:
in no argv, each rank its own host's value."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from sshd_cluster import SshdCluster

from console.jobs.models import JobState
from console.jobs.plan.mpi_secrets import env_file_name
from console.jobs.spec import make_spec
from tests.integration.test_jobs_mpi import (
    finish,
    launcher_output,
    needs_horovodrun,
    rank_output,
    runner_for,
    shared_cluster,
)
from tests.integration.test_secrets_argv import scan_as_nobody
from tests.integration.test_supervisor import wait_for

pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.mpi]

SECRET = "hvd-Qp43-gloo-env-value"
DIGEST = hashlib.sha256(SECRET.encode()).hexdigest()
# The inventory's env, a value per host (node0's, node1's): each rank gets its own host's.
SITE = {"node0": "site-Ma17-node0-value", "node1": "site-Jc58-node1-value"}
# Each rank says whether the secret reached it (by digest: its own argv must not hold
# it) and the digest of its host's inventory value, then waits for the test's go (a
# file in the job's directory).
PROGRAM = (
    "import hashlib, os, time; "
    "d = os.environ['DISTCONSOLE_JOB_DIR']; "
    "ok = hashlib.sha256(os.environ.get('HVD_TOKEN', '').encode()).hexdigest() == "
    f"{DIGEST!r}; "
    "site = hashlib.sha256(os.environ.get('SITE_TOKEN', '').encode()).hexdigest()[:12]; "
    "print('token', os.environ['HOROVOD_RANK'], ok, site, flush=True); "
    "[time.sleep(0.1) for _ in iter(lambda: not os.path.exists(os.path.join(d, 'go')), False)]"
)


def with_site_env(inventory: Path) -> None:
    """Each host of the inventory gets its own ``SITE_TOKEN`` in its ``env``."""
    data = yaml.safe_load(inventory.read_text())
    for host in data["hosts"]:
        host["env"] = {"SITE_TOKEN": SITE[host["name"]]}
    inventory.write_text(yaml.safe_dump(data))


@needs_horovodrun
async def test_horovodrun_gloo_ranks_get_env_values_in_no_argv(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = shared_cluster(sshd_cluster, 2)
    with_site_env(cluster.inventory_path)
    async with runner_for(cluster, tmp_path) as runner:
        spec = make_spec(
            kind="horovod",
            program="python3",
            args=["-c", PROGRAM],
            gpus_per_host=1,
            env={"HVD_TOKEN": SECRET, "HOROVOD_GLOO_TIMEOUT_SECONDS": "60"},
        )
        plan = await runner.prepare(spec)
        launch = plan.launches[0]
        assert "HVD_TOKEN" not in launch.env and SECRET not in " ".join(launch.argv)
        assert "SITE_TOKEN" not in launch.env
        assert not any(v in " ".join(launch.argv) for v in SITE.values())
        assert launch.env["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "60"  # horovodrun's own
        job = await runner.launch(plan)
        wait_for(lambda: all("token" in t for t in rank_output(cluster, plan).values()), 60)
        # "distconsole-rank" ($0 of every rank's wrapper): the scan saw the ranks.
        scan = scan_as_nobody((SECRET, *SITE.values(), "distconsole-rank"))
        home = cluster.hosts[0].home
        job_dir = home / plan.job_dirs[launch.host].removeprefix("~/")
        (job_dir / "go").touch()
        state = await finish(runner, job, cluster)
        assert state is JobState.SUCCEEDED, launcher_output(cluster, plan)[-3000:]
    found = [hit for hit in scan["found"] if hit[0] != "distconsole-rank"]  # type: ignore[union-attr]
    assert found == [] and len(found) < len(scan["found"]), scan["found"]  # type: ignore[arg-type]
    assert int(str(scan["seen"])) > 10
    said = sorted(t.strip() for t in rank_output(cluster, plan).values())
    site = {h: hashlib.sha256(v.encode()).hexdigest()[:12] for h, v in SITE.items()}
    assert said == [f"token 0 True {site['node0']}", f"token 1 True {site['node1']}"], said
    for host in SITE:  # one file per host: the hosts share this home
        assert (job_dir / env_file_name(host)).stat().st_mode & 0o077 == 0
