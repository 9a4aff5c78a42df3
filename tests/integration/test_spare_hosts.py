"""--spare-hosts on real sshd hosts, no console open after ``launch --detach``: a spare's
torchrun agent waits behind its gate until a host is lost (killed whole at step ~20);
then it joins torch's c10d rendezvous, the survivors' agents meet again with it, and the
job succeeds on 3 hosts again. A restart with no host lost stays on the job's hosts."""

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
        # A spare outside --hosts: the launch connects to it too (it was a KeyError).
        "--hosts", "node0,node1,node2", "--spare-hosts", "node3",
        "--", "example:ddp", "--steps", "60", "--sleep", "0.15",
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    job_id = launched.stdout.strip()
    plan = json.loads((job_dir(cluster, "node0", job_id) / "job.json").read_text())
    hosts = [la["host"] for la in plan["plan"]["launches"]]
    assert hosts == ["node0", "node1", "node2", "node3"], hosts
    # The spare holds no work meanwhile: its agent waits for the leader's word, which
    # comes only once a host is lost (never in the rendezvous beside 3 agents).
    at_20 = re.compile(r"rank \d step 20/")
    wait_for(lambda: bool(at_20.search(output(cluster, "node2", 2, job_id))), timeout=120)
    assert "step" not in output(cluster, "node3", 3, job_id)
    assert not (job_dir(cluster, "node3", job_id) / "spare-go.node3").exists()
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


def test_a_restart_with_no_host_lost_stays_on_the_jobs_hosts_and_no_spare_is_needed(
    sshd_cluster, tmp_path
) -> None:
    """A crash-once rank, no host lost: torchrun restarts the workers and the next round
    is the job's own 3 hosts again; the spare's agent never starts (no host was lost),
    never runs a rank, counts as no join, and its end with the job is no failure.
    Before, the spare's agent waited in torch's redundancy list, left it as soon as the
    restart emptied a place and raced the job's agents into the next round: 4 agents for
    3 places, one always in the wait list of a full round, and every agent restarted its
    workers for it every 1.5-3 s until the job was stopped."""
    cluster = sshd_cluster(n=4)
    launched = dc(
        tmp_path, "launch", str(cluster.inventory_path), "--detach",
        "--kind", "ddp", "--gpus-per-host", "1", "--min-hosts", "2", "--max-restarts", "2",
        "--spare-hosts", "node3", "--", "example:ddp", "--steps", "40", "--sleep", "0.1",
        "--crash-rank", "1", "--crash-at-step", "20", "--crash-once",
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    job_id = launched.stdout.strip()
    record = wait_over(cluster, job_id)
    spare_out = output(cluster, "node3", 3, job_id)
    texts = [output(cluster, f"node{i}", i, job_id) for i in range(3)]
    assert record["state"] == "succeeded", (record, spare_out[-3000:], texts[1][-3000:])
    assert record["first_failure"] is None and record["restarts"] == 1, record
    errors = [job_dir(cluster, f"node{i}", job_id) / f"torchrun-{i}.err" for i in range(3)]
    assert any("crashing at step 20" in e.read_text(errors="replace") for e in errors)
    assert record["hosts_now"] == ["node0", "node1", "node2"] and not record["joins"], record
    assert not record["scale_downs"], record
    # The spare never ran a rank; the job's hosts trained to the end, every rank agreeing.
    assert not re.search(r"rank \d step", spare_out), spare_out[-3000:]
    text = "\n".join(texts)
    assert len(re.findall(r"rank \d params_checksum=", text)) == 3, text[-3000:]
    spare_dir = job_dir(cluster, "node3", job_id)
    assert not (spare_dir / "spare-go.node3").exists()  # its agent never started
    assert "spare-joined" not in (spare_dir / "events.node3.jsonl").read_text()
    [job] = jobs_json(tmp_path, cluster.inventory_path)
    assert job["state"] == "succeeded", job
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
