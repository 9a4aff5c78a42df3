"""Horovod elastic on real sshd hosts, no console open after ``launch --detach``: a rank
that exits 3 once mid-run is restarted by horovodrun's elastic driver (the discovery
script in the launcher host's job directory lists the job's hosts), every rank goes on
from the last committed state, the job succeeds, and the supervisors count the reset as
a restart (``jobs --json``, a ``restarted`` event). With ``--min-hosts 2`` a host lost
mid-run (its sshd and its processes killed) is a scale-down: the launcher host's
supervisor takes it out of the hosts the discovery script prints, and the job succeeds
on the two left."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest
from sshd_cluster import SshdCluster

from tests.integration.test_elastic import leader_record
from tests.integration.test_jobs_cli import assert_nothing_left, dc, jobs_json
from tests.integration.test_jobs_mpi import needs_horovodrun
from tests.integration.test_restarts import launch, restarted, wait_until_over
from tests.integration.test_supervisor import events, job_dir, wait_for

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

JOB_TIMEOUT_S = 90
# A survivor waiting on a recv from the other survivor (its ring neighbour, itself in
# Horovod's reset after the lost rank's connection reset) waits this long (Horovod's
# default 30 s) before it resets too: the README's advice for a faster recovery.
GLOO_TIMEOUT = "HOROVOD_GLOO_TIMEOUT_SECONDS"
TELL = 'echo "$DISTCONSOLE_EVENT $DISTCONSOLE_HOST: $DISTCONSOLE_REASON" >>told'  # in the job dir


def files(cluster: SshdCluster, job_id: str, hosts: tuple[str, ...] = ("node0", "node1")) -> str:
    """Every small file of the job on each host, for a failure's message."""
    out = []
    for host in hosts:
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
    job = wait_until_over(tmp_path, cluster, JOB_TIMEOUT_S, job_id=job_id)
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


@needs_horovodrun
def test_horovod_elastic_goes_on_without_a_lost_host(sshd_cluster, tmp_path) -> None:
    """3 hosts x 1 slot, --min-hosts 2 (horovodrun --min-np 2): node2 is killed whole
    (sshd, sessions, its processes: ``SshdCluster.stop``, as test_elastic does) at step
    7; the launcher host's supervisor reads Horovod's report of the failed worker, finds
    node2's ssh refused and scales down; the job succeeds on node0 and node1."""
    cluster = sshd_cluster(n=3, shared_account=True)
    cluster.write_inventory(interface="lo")
    started = time.monotonic()
    job_id = launch(
        tmp_path, cluster, "--kind", "horovod", "--gpus-per-host", "1", "--max-restarts", "2",
        "--horovod-elastic", "--min-hosts", "2", "--env", f"{GLOO_TIMEOUT}=10",
        "--notify-command", TELL, "--notify-on", "scaled-down,succeeded",
        "--", "example:horovod", "--steps", "20", "--sleep", "0.2",
    )  # fmt: skip
    launcher = job_dir(cluster, "node0", job_id)
    plan = json.loads((launcher / "job.json").read_text())
    argv = plan["plan"]["launches"][0]["argv"][2]
    assert "--min-np 2 --max-np 3" in argv, argv
    # node2's slot keeps planned rank 2's files (one home: every host's job directory).
    mine = launcher / "ranks/rank.2/stdout"
    at_7 = re.compile(r"rank \d step 7/")
    wait_for(lambda: mine.exists() and bool(at_7.search(mine.read_text())), timeout=60)
    lost_at = time.time()
    cluster.stop("node2")
    record = {}
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while record.get("state") in (None, "running", "hung"):
        assert time.monotonic() < deadline, (record, files(cluster, job_id))
        time.sleep(0.5)
        record = leader_record(cluster, job_id)
    took = time.monotonic() - started
    log = (launcher / "horovodrun-0.err").read_text(errors="replace")[-30000:]
    assert record["state"] == "succeeded", (record, log)
    assert record["hosts_now"] == ["node0", "node1"] and record["hosts_total"] == 3, record
    [down] = record["scale_downs"]
    assert down["host"] == "node2" and "ssh from node0 cannot reach it" in down["cause"], down
    assert "Horovod's worker there failed" in down["cause"], down
    scaled = [e for e in events(cluster, "node0", job_id) if e["event"] == "scaled-down"]
    assert [e["peer"] for e in scaled] == ["node2"] and scaled[0]["t"] >= lost_at, scaled
    # The discovery script no longer names node2: Horovod went on with the two others.
    home = {**os.environ, "HOME": str(cluster.host("node0").home)}  # the job's "~/"
    script = subprocess.run(
        ["sh", str(launcher / "horovod-hosts.sh")], capture_output=True, text=True, env=home
    )
    assert script.stdout.split() == [f"{cluster.host(h).address}:1" for h in ("node0", "node1")]
    text = "\n".join(
        (launcher / f"ranks/rank.{r}/stdout").read_text(errors="replace") for r in (0, 1)
    )
    assert text.count("step 20/20") == 2 and len(set(re.findall(r"checksum=(\S+)", text))) == 1
    # --notify-on scaled-down: the leader host's command ran once for it (in the job dir).
    told = launcher / "told"
    wait_for(lambda: told.exists() and "succeeded" in told.read_text(), timeout=30)
    lines = told.read_text().splitlines()
    assert lines[0].startswith("scaled-down node2: node2 left (host lost: "), lines
    assert lines[0].endswith("; 2 of 3 hosts went on") and len(lines) == 2, lines
    [job] = jobs_json(tmp_path, cluster.inventory_path)
    assert job["state"] == "succeeded", job
    assert job["hosts_now"] == ["node0", "node1"] and job["hosts_total"] == 3, job
    assert job["restarts"] == 0, job  # a lost host's drop by Horovod is no restart
    out = tmp_path / "report"
    dc(tmp_path, "report", str(cluster.inventory_path), job_id, "--out", str(out))
    summary = (out / "summary.txt").read_text()
    assert re.search(r"scaled down at .*: node2 left \(host lost: .+\); 2 of 3 hosts", summary), (
        summary
    )
    timeline = (out / "timeline.txt").read_text()
    assert re.search(r' scaled-down peer="node2" cause="host lost: .+"', timeline), timeline
    assert_nothing_left(cluster)
    print(
        f"horovod elastic job with a lost host took {took:.1f} s; scale-down",
        round(scaled[0]["t"] - lost_at, 1),
        "s after the crash",
    )
