"""--min-hosts on real sshd hosts, no console open after ``launch --detach``: a host lost
mid-job (its sshd, its sessions and every process of its user killed) is a scale-down,
and the job goes on with the hosts left, from their checkpoints (torchrun's elastic
membership, ``--nnodes M:N``; the supervisors' policy with ``min_hosts``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from gpu_standin import readable_standin_dir
from sshd_cluster import SETUP_LINE, SshdCluster

from tests.integration.test_jobs_cli import CLI, assert_nothing_left, cli_env, dc, jobs_json
from tests.integration.test_supervisor import events, job_dir, wait_for

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

JOB_TIMEOUT_S = 240
CAPTURES = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi"


def leader_record(cluster: SshdCluster, job_id: str) -> dict[str, Any]:
    path = job_dir(cluster, "node0", job_id) / "supervisor.json"
    try:
        record: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return record


def output(cluster: SshdCluster, host: str, index: int, job_id: str) -> str:
    path = job_dir(cluster, host, job_id) / f"torchrun-{index}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def wait_over(cluster: SshdCluster, job_id: str) -> dict[str, Any]:
    """The leader's record once final, read from its files (no console reads the job)."""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while leader_record(cluster, job_id).get("state") in (None, "running", "hung"):
        assert time.monotonic() < deadline, leader_record(cluster, job_id)
        time.sleep(0.5)
    return leader_record(cluster, job_id)


def test_a_lost_host_scales_the_job_down_and_it_succeeds_on_the_others(
    sshd_cluster, tmp_path
) -> None:
    cluster = sshd_cluster(n=3)
    launched = dc(
        tmp_path, "launch", str(cluster.inventory_path), "--detach",
        "--kind", "ddp", "--gpus-per-host", "1", "--min-hosts", "2", "--max-restarts", "3",
        # 40 steps: the crash comes at 20 and the survivors cannot pass step 21 without
        # node2 until the scale-down, so 20 steps after it prove the job went on (60 only
        # cost 3 s more of training).
        "--", "example:ddp", "--steps", "40", "--sleep", "0.15",
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    job_id = launched.stdout.strip()
    plan = json.loads((job_dir(cluster, "node0", job_id) / "job.json").read_text())
    argv = " ".join(plan["plan"]["launches"][0]["argv"])
    assert "--nnodes 2:3" in argv and "last_call_timeout=2" in argv, argv
    # The third host crashes at step 20: sshd, sessions and its user's processes.
    # (which global ranks a host holds is the rendezvous' choice)
    at_20 = re.compile(r"rank \d step 20/")
    wait_for(lambda: bool(at_20.search(output(cluster, "node2", 2, job_id))), timeout=120)
    lost_at = time.time()
    cluster.stop("node2")
    # No console reads the job meanwhile: the supervisors decide alone.
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while leader_record(cluster, job_id).get("state") in (None, "running", "hung"):
        assert time.monotonic() < deadline, leader_record(cluster, job_id)
        time.sleep(0.5)
    record = leader_record(cluster, job_id)
    outputs = [output(cluster, f"node{i}", i, job_id) for i in (0, 1)]
    errors = [
        (job_dir(cluster, f"node{i}", job_id) / f"torchrun-{i}.err").read_text()[-4000:]
        for i in (0, 1)
    ]
    assert record["state"] == "succeeded", (record, errors)
    assert record["hosts_now"] == ["node0", "node1"] and record["hosts_total"] == 3, record
    [down] = record["scale_downs"]
    assert down["host"] == "node2" and down["cause"], down
    text = "\n".join(outputs)
    # Both survivors resumed from a checkpoint near the crash, in a world of 2 ranks.
    resumed = [int(s) for s in re.findall(r"rank \d resumed from step (\d+)", text)]
    assert len(resumed) == 2 and all(10 <= step <= 20 for step in resumed), text[-3000:]
    assert text.count("world_size 2 ") == 2, text[-3000:]
    assert len(re.findall(r"rank \d params_checksum=", text)) == 2, text[-3000:]
    scaled = [e for e in events(cluster, "node0", job_id) if e["event"] == "scaled-down"]
    assert [(e["host"], e["peer"]) for e in scaled] == [("node0", "node2")], scaled
    assert scaled[0]["at"] >= lost_at - 1, scaled
    print("scale-down", round(scaled[0]["at"] - lost_at, 1), "s after the crash:", down["cause"])
    # What a console reads afterwards.
    [job] = jobs_json(tmp_path, cluster.inventory_path)
    assert job["state"] == "succeeded", job
    assert job["hosts_now"] == ["node0", "node1"] and job["hosts_total"] == 3, job
    assert job["hosts"] == ["node0", "node1", "node2"], job
    table = dc(tmp_path, "jobs", str(cluster.inventory_path))
    assert "2 of 3 hosts" in table.stdout, table.stdout
    out = tmp_path / "report"
    made = dc(tmp_path, "report", str(cluster.inventory_path), job_id, "--out", str(out))
    # Written, with node2's part missing: the report says it is down (exit status 1).
    assert "node2 is down" in made.stderr and (out / "summary.txt").exists(), made.stderr
    summary = (out / "summary.txt").read_text()
    assert re.search(r"scaled down at .*: node2 left \(.+\); 2 of 3 hosts went on", summary), (
        summary
    )
    assert re.search(r"effective training time: \d+% \(", summary), summary
    timeline = (out / "timeline.txt").read_text()
    assert re.search(r' scaled-down peer="node2" cause=".+"', timeline), timeline
    assert_nothing_left(cluster)


def test_a_host_whose_gpu_fails_is_drained_and_the_job_goes_on(sshd_cluster, tmp_path) -> None:
    """Each host's nvidia-smi is the GPU STAND-IN replaying a real H200 capture, one
    capture per host user; at step 20 node2's is switched to the same capture with
    faults set (2 uncorrectable ECC errors, a row remap pending): its supervisor drains
    it, the job goes on with node0 and node1."""
    cluster = sshd_cluster(n=3)
    captures = Path(tempfile.mkdtemp(prefix="distconsole-drain-", dir="/tmp"))
    try:
        captures.chmod(0o755)
        for host in cluster.hosts:
            for part in ("query-gpu", "compute-apps"):
                target = captures / f"cap-{host.user}_{part}.csv"
                shutil.copyfile(CAPTURES / f"csv_h200_{part}.csv", target)
                target.chmod(0o644)
        standin = readable_standin_dir()
        cluster.write_inventory(
            setup=f"{SETUP_LINE} && export PATH={standin}:$PATH "
            f"NVSMI_STANDIN_CAPTURE={captures}/cap-$USER"
        )
        launched = dc(
            tmp_path, "launch", str(cluster.inventory_path), "--detach", "--skip-preflight",
            "--kind", "ddp", "--gpus-per-host", "1", "--min-hosts", "2", "--max-restarts", "3",
            "--", "example:ddp", "--steps", "60", "--sleep", "0.15",
        )  # fmt: skip
        assert launched.returncode == 0, launched.stderr
        job_id = launched.stdout.strip()
        at_20 = re.compile(r"rank \d step 20/")
        wait_for(lambda: bool(at_20.search(output(cluster, "node2", 2, job_id))), timeout=120)
        faulty = captures / "next.csv"
        shutil.copyfile(CAPTURES / "csv_h200-faults_query-gpu.csv", faulty)
        faulty.chmod(0o644)
        os.replace(faulty, captures / f"cap-{cluster.host('node2').user}_query-gpu.csv")
        record = wait_over(cluster, job_id)
        assert record["state"] == "succeeded", record
        assert record["hosts_now"] == ["node0", "node1"], record
        [down] = record["scale_downs"]
        assert down["host"] == "node2", down
        assert "drained: GPU 0: 2 uncorrectable ECC error(s)" in down["cause"], down
        assert "row remap pending" in down["cause"], down
        mine = (job_dir(cluster, "node2", job_id) / "events.node2.jsonl").read_text()
        assert '"event": "drained"' in mine, mine
        told = [e for e in events(cluster, "node0", job_id) if e["event"] == "host-drained"]
        assert [e["peer"] for e in told] == ["node2"], told
        text = output(cluster, "node0", 0, job_id) + output(cluster, "node1", 1, job_id)
        assert len(re.findall(r"rank \d params_checksum=", text)) == 2, text[-3000:]
        [job] = jobs_json(tmp_path, cluster.inventory_path)
        assert job["state"] == "succeeded" and job["hosts_now"] == ["node0", "node1"], job
        assert_nothing_left(cluster)
    finally:
        shutil.rmtree(captures, ignore_errors=True)


def test_a_console_watching_an_elastic_job_lets_it_go_on_without_a_lost_host(
    sshd_cluster, tmp_path
) -> None:
    """An attached ``launch`` (the console's watch): the lost host's verdict is the
    leader's to give, and it gives none while the job trains on without the host. The
    console must not take that silence for every supervisor gone and stop the job (it
    did, once its wait for a verdict ran out: 4 s + the grace + 5 s, 11 s here, while
    the survivors' recovery and the steps left take longer)."""
    cluster = sshd_cluster(n=2)
    proc = subprocess.Popen(
        [
            *CLI, "launch", str(cluster.inventory_path), "--kind", "ddp", "--gpus-per-host",
            "1", "--min-hosts", "1", "--max-restarts", "1", "--skip-preflight", "--grace", "2",
            "--", "example:ddp", "--steps", "60", "--sleep", "0.15",
        ],
        env=cli_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        at_10 = re.compile(r"rank \d step 10/")
        wait_for(lambda: bool(at_10.search(output(cluster, "node1", 1, _job_id(cluster)))), 120)
        cluster.stop("node1")
        out, err = proc.communicate(timeout=JOB_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "node1: connection lost" in err and "the job goes on without it" in err, err[-3000:]
    assert proc.returncode == 0, err[-3000:]
    assert re.search(r"job \S+ succeeded", err), err[-3000:]
    assert "rank 0 params_checksum=" in out, out[-3000:]
    [job] = jobs_json(tmp_path, cluster.inventory_path)
    assert job["state"] == "succeeded" and job["hosts_now"] == ["node0"], job


def _job_id(cluster: SshdCluster) -> str:
    """The one job on node1 ("" until its directory is there)."""
    jobs = job_dir(cluster, "node1", "x").parent
    found = sorted(p.name for p in jobs.iterdir()) if jobs.is_dir() else []
    return found[0] if found else ""
