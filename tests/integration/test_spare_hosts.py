"""--spare-hosts on real sshd hosts, no console open after ``launch --detach``: a spare's
torchrun agent, started once the first round formed, waits in torch's c10d rendezvous
(its redundancy list); when a host is lost (killed whole at step ~20) the survivors'
agents meet again with the spare, and the job succeeds on 3 hosts again."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.integration.test_elastic import leader_record, output, wait_over
from tests.integration.test_jobs_cli import assert_nothing_left, dc, jobs_json
from tests.integration.test_supervisor import events, job_dir, wait_for

pytestmark = [pytest.mark.sshd, pytest.mark.slow]


def test_a_spare_host_replaces_a_lost_host_and_the_job_succeeds(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=4)
    started = time.monotonic()
    launched = dc(
        tmp_path, "launch", str(cluster.inventory_path), "--detach",
        "--kind", "ddp", "--gpus-per-host", "1", "--min-hosts", "2", "--max-restarts", "3",
        "--spare-hosts", "node3",
        "--", "example:ddp", "--steps", "60", "--sleep", "0.15",
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    job_id = launched.stdout.strip()
    plan = json.loads((job_dir(cluster, "node0", job_id) / "job.json").read_text())
    hosts = [la["host"] for la in plan["plan"]["launches"]]
    assert hosts == ["node0", "node1", "node2", "node3"], hosts
    # The spare holds no work meanwhile: its agent waits for the leader's word, then in
    # the rendezvous (the first round already holds 3 agents).
    at_20 = re.compile(r"rank \d step 20/")
    wait_for(lambda: bool(at_20.search(output(cluster, "node2", 2, job_id))), timeout=120)
    assert "step" not in output(cluster, "node3", 3, job_id)
    gate = job_dir(cluster, "node3", job_id) / "spare-go.node3"
    wait_for(gate.exists, timeout=10)
    lost_at = time.time()
    cluster.stop("node2")
    record = wait_over(cluster, job_id)
    spare_out = output(cluster, "node3", 3, job_id)
    assert record["state"] == "succeeded", (record, spare_out[-3000:])
    assert record["hosts_now"] == ["node0", "node1", "node3"], record
    assert record["hosts_total"] == 3, record
    [down] = record["scale_downs"]
    assert down["host"] == "node2" and down["cause"], down
    [join] = record["joins"]
    assert join["host"] == "node3" and join["at"] >= lost_at - 1, join
    # The spare's ranks trained, in a world of 3 again, and every rank agrees.
    assert re.search(r"rank \d step \d+/60", spare_out), spare_out[-3000:]
    text = "\n".join(output(cluster, f"node{i}", i, job_id) for i in (0, 1, 3))
    assert len(re.findall(r"rank \d params_checksum=", text)) == 3, text[-3000:]
    mine = (job_dir(cluster, "node3", job_id) / "events.node3.jsonl").read_text()
    assert '"event": "spare-joined"' in mine, mine
    timeline_events = [e["event"] for e in events(cluster, "node0", job_id)]
    assert "scaled-down" in timeline_events and "spare-joined" in timeline_events
    print("replaced in", round(join["at"] - lost_at, 1), "s; job", time.monotonic() - started)
    [job] = jobs_json(tmp_path, cluster.inventory_path)
    assert job["state"] == "succeeded" and job["hosts_now"] == ["node0", "node1", "node3"], job
    # `hosts` as planned (not the spare), the spares and those that joined.
    assert job["hosts"] == ["node0", "node1", "node2"] and job["hosts_total"] == 3, job
    assert job["spare_hosts"] == ["node3"] and job["spares_joined"] == ["node3"], job
    table = dc(tmp_path, "jobs", str(cluster.inventory_path))
    assert "3 of 3 hosts" in table.stdout, table.stdout
    out = tmp_path / "report"
    dc(tmp_path, "report", str(cluster.inventory_path), job_id, "--out", str(out))
    summary = (out / "summary.txt").read_text()
    assert re.search(r"scaled down at .*: node2 left \(.+\)", summary), summary
    assert re.search(r"^replacements: node3 joined for node2 at [\d-]+ [\d:]+$", summary, re.M)
    assert "ranks on node0, node1, node2 (spare hosts: node3)" in summary, summary
    timeline = (out / "timeline.txt").read_text()
    assert re.search(r' scaled-down peer="node2"', timeline), timeline
    # The replacement is an event with its cause: the host it replaced, when it left.
    joined = re.search(
        r' spare-joined peer="node3" .*replaced="node2" cause="node2 left at ', timeline
    )
    assert joined, timeline
    assert leader_record(cluster, job_id)["state"] == "succeeded"
    assert_nothing_left(cluster)


def test_a_spare_never_needed_ends_with_the_job_and_is_no_failure(sshd_cluster, tmp_path) -> None:
    """No host lost: the spare's agent waits until the job ends (its rendezvous closes,
    or its store goes: torch's agent then exits 1 by itself), the job succeeds."""
    cluster = sshd_cluster(n=4)
    launched = dc(
        tmp_path, "launch", str(cluster.inventory_path), "--detach",
        "--kind", "ddp", "--gpus-per-host", "1", "--min-hosts", "2", "--max-restarts", "3",
        "--spare-hosts", "node3", "--", "example:ddp", "--steps", "30", "--sleep", "0.1",
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    job_id = launched.stdout.strip()
    record = wait_over(cluster, job_id)
    assert record["state"] == "succeeded" and record["first_failure"] is None, record
    assert record["hosts_now"] == ["node0", "node1", "node2"] and not record["joins"], record
    assert "step" not in output(cluster, "node3", 3, job_id)
    [job] = jobs_json(tmp_path, cluster.inventory_path)
    assert job["hosts_now"] == ["node0", "node1", "node2"] and job["hosts_total"] == 3, job
    assert job["hosts"] == ["node0", "node1", "node2"], job  # the spare never joined
    assert job["spare_hosts"] == ["node3"] and job["spares_joined"] == [], job
    out = tmp_path / "report"
    dc(tmp_path, "report", str(cluster.inventory_path), job_id, "--out", str(out))
    summary = (out / "summary.txt").read_text()
    assert re.search(r"^node3: spare, not needed$", summary, re.M), summary
    assert re.search(r"^  node3 torchrun-3: spare, not needed \(", summary, re.M), summary
    assert "replacements" not in summary, summary
    assert_nothing_left(cluster)
