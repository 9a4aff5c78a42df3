"""Horovod elastic on real sshd hosts, no console open after ``launch --detach``: a rank
that exits 3 once mid-run is restarted by horovodrun's elastic driver (the discovery
script in the launcher host's job directory lists the job's hosts), every rank goes on
from the last committed state, the job succeeds, and the supervisors count the reset as
a restart (``jobs --json``, a ``restarted`` event)."""

from __future__ import annotations

import re
import time

import pytest
from sshd_cluster import SshdCluster

from tests.integration.test_jobs_cli import assert_nothing_left, dc
from tests.integration.test_jobs_mpi import needs_horovodrun
from tests.integration.test_restarts import launch, restarted, wait_until_over
from tests.integration.test_supervisor import job_dir

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

JOB_TIMEOUT_S = 90


def files(cluster: SshdCluster, job_id: str) -> str:
    """Every small file of the job on each host, for a failure's message."""
    out = []
    for host in ("node0", "node1"):
        for path in sorted(job_dir(cluster, host, job_id).rglob("*")):
            if path.is_file() and path.suffix not in (".py", ".pt") and "secret" not in path.name:
                out.append(f"== {host} {path.name}\n{path.read_text(errors='replace')[-1500:]}")
    return "\n".join(out)


@needs_horovodrun
def test_horovod_elastic_restarts_a_crashed_rank_and_resumes(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2, shared_account=True)
    cluster.write_inventory(interface="lo")
    started = time.monotonic()
    job_id = launch(
        tmp_path, cluster, "--kind", "horovod", "--gpus-per-host", "1", "--max-restarts", "2",
        "--horovod-elastic",
        "--", "example:horovod", "--steps", "30", "--crash-rank", "1", "--crash-at-step", "13",
        "--crash-once", "--sleep", "0.25",
    )  # fmt: skip
    job = wait_until_over(tmp_path, cluster, JOB_TIMEOUT_S)
    took = time.monotonic() - started
    launcher = job_dir(cluster, "node0", job_id)
    log = (launcher / "horovodrun-0.err").read_text(errors="replace")[-4000:]
    assert job["state"] == "succeeded", (job, files(cluster, job_id))
    assert job["restarts"] >= 1, (job, log)
    # The discovery script horovodrun ran: in the launcher host's job directory.
    script = (launcher / "horovod-hosts.sh").read_text()
    assert "127.0.0." in script and "exec " in script, script
    # Each slot keeps its planned rank's files, whichever rank Horovod gives it (its
    # elastic driver may give rank 0 to node1's slot): read them together.
    outs = {}
    for rank, host in enumerate(("node0", "node1")):
        outs[rank] = (job_dir(cluster, host, job_id) / f"ranks/rank.{rank}/stdout").read_text()
    text = "\n".join(outs.values())
    # Committed every 5 steps: the crash at 13 takes rank 0 back to step 10, on alone;
    # rank 1's slot, started again once its host's cooldown is over, syncs from rank 0.
    assert "rank 0 resumed from step 10" in text, text[-3000:]
    resumed = [int(k) for k in re.findall(r"rank 1 resumed from step (\d+)", text)]
    assert resumed and resumed[-1] >= 10, text[-3000:]
    for out in outs.values():
        assert "step 30/30" in out and "params_checksum=" in out, out[-2000:]
    starts = sorted(
        (job_dir(cluster, host, job_id) / f"ranks/rank.{rank}/starts").read_text().strip()
        for rank, host in enumerate(("node0", "node1"))
    )
    assert starts == ["1", "2"], starts  # the crashed rank's slot started twice
    sums = {re.findall(r"params_checksum=(\S+)", o)[-1] for o in outs.values()}
    assert len(sums) == 1, outs
    [event, *_] = restarted(cluster, job_id)
    assert event["count"] >= 1, event
    table = dc(tmp_path, "jobs", str(cluster.inventory_path))
    assert "succeeded · restart" in table.stdout, table.stdout
    assert_nothing_left(cluster)
    print(f"horovod elastic job took {took:.1f} s")
