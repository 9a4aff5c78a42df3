"""Horovod elastic with a rendezvous host (issue 31 item 3) on real sshd hosts, no console
open after ``launch --detach``: horovodrun (Horovod's driver) and the job's leader
supervisor run on node3, which has no slot; the discovery script lists node0..node2.
node0, the first training host, is killed whole mid-run (its sshd and every process
started through it): the driver's supervisor reads Horovod's report of the failed
worker, finds node0's ssh refused and scales down, and the job succeeds on node1 and
node2 (without a rendezvous host, losing the first host ends the job)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from tests.integration.test_elastic import leader_record
from tests.integration.test_horovod_elastic import GLOO_TIMEOUT, files
from tests.integration.test_jobs_cli import assert_nothing_left
from tests.integration.test_jobs_mpi import needs_horovodrun
from tests.integration.test_restarts import launch
from tests.integration.test_supervisor import events, job_dir, wait_for

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

JOB_TIMEOUT_S = 120


@needs_horovodrun
def test_horovod_elastic_on_a_rendezvous_host_goes_on_without_the_first_host(
    sshd_cluster, tmp_path
) -> None:
    cluster = sshd_cluster(n=4, shared_account=True)  # one home: one job directory
    cluster.write_inventory(interface="lo")
    job_id = launch(
        tmp_path, cluster, "--kind", "horovod", "--gpus-per-host", "1", "--max-restarts", "2",
        "--horovod-elastic", "--min-hosts", "2", "--rendezvous-host", "node3",
        "--env", f"{GLOO_TIMEOUT}=10", "--", "example:horovod", "--steps", "20", "--sleep", "0.2",
    )  # fmt: skip
    home = job_dir(cluster, "node3", job_id)
    plan = json.loads((home / "job.json").read_text())["plan"]
    [driver] = plan["launches"]
    assert driver["host"] == "node3" and plan["rendezvous_host"] == "node3", plan
    assert "--min-np 2 --max-np 3" in driver["argv"][2], driver["argv"]
    # The discovery script lists the training hosts only: node3 has no slot.
    env = {**os.environ, "HOME": str(cluster.host("node3").home)}  # the job's "~/"
    wait_for(lambda: (home / "horovod-hosts.sh").exists(), timeout=60)
    script = subprocess.run(
        ["sh", str(home / "horovod-hosts.sh")], capture_output=True, text=True, env=env
    )
    assert script.stdout.split() == [f"{cluster.host(f'node{i}').address}:1" for i in range(3)]
    mine = home / "ranks/rank.0/stdout"  # node0's slot keeps planned rank 0's files
    at_7 = re.compile(r"rank \d step 7/")
    wait_for(lambda: mine.exists() and bool(at_7.search(mine.read_text())), timeout=90)
    lost_at = time.time()
    cluster.stop("node0")
    record: dict = {}
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while record.get("state") in (None, "running", "hung"):
        assert time.monotonic() < deadline, (record, files(cluster, job_id, ("node3",)))
        time.sleep(0.5)
        record = leader_record(cluster, job_id)  # one home: node0's path is node3's file
    log = (home / "horovodrun-0.err").read_text(errors="replace")[-20000:]
    assert record["state"] == "succeeded", (record, log)
    assert record["host"] == "node3" and record["leader"], record
    assert record["hosts_now"] == ["node1", "node2"] and record["hosts_total"] == 3, record
    [down] = record["scale_downs"]
    assert down["host"] == "node0" and "ssh from node3 cannot reach it" in down["cause"], down
    scaled = [e for e in events(cluster, "node3", job_id) if e["event"] == "scaled-down"]
    assert [e["peer"] for e in scaled] == ["node0"] and scaled[0]["t"] >= lost_at, scaled
    text = "\n".join((home / f"ranks/rank.{r}/stdout").read_text() for r in (1, 2))
    assert text.count("step 20/20") == 2, text[-3000:]
    assert len(set(re.findall(r"checksum=(\S+)", text))) == 1, text[-3000:]
    assert_nothing_left(cluster)
    print("scale-down", round(scaled[0]["t"] - lost_at, 1), "s after node0 was lost")
