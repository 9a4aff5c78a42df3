"""The hosts are the source of truth: ``jobs`` from a fresh data dir (another laptop)
discovers the jobs on the hosts, and ``report`` writes a job's post-mortem bundle.
Real sshd hosts with their own users, real torchrun, real ``distconsole`` processes.

The supervisor's records (supervisor.json, supervisor.pid) are read per the issue-12
contract; where a test needs a particular record (a failure naming a rank, a dead
supervisor) it writes it into the leader's job directory as the supervisor would."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sshd_cluster import SshdCluster

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

CLI = [sys.executable, "-m", "console"]
TIMEOUT_S = 180


def dc(data: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(data))
    return subprocess.run(
        [*CLI, *args], env=env, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=cwd
    )


def jobs_json(data: Path, inventory: Path) -> list[dict[str, Any]]:
    result = dc(data, "jobs", str(inventory), "--json")
    assert result.returncode == 0, result.stderr
    found: list[dict[str, Any]] = json.loads(result.stdout)
    return found


def job_dir(cluster: SshdCluster, host: int, job_id: str) -> Path:
    return cluster.hosts[host].home / "distconsole" / ".distconsole" / "jobs" / job_id


def write_as_host(cluster: SshdCluster, host: int, path: Path, text: str) -> None:
    """Write a file in a host's job directory owned by its user, atomically (as the
    supervisor does with write_atomic)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chown(tmp, cluster.hosts[host].uid, cluster.hosts[host].gid)
    tmp.replace(path)


def wait_state(data: Path, inventory: Path, job_id: str, leave: str) -> dict[str, Any]:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        [job] = [j for j in jobs_json(data, inventory) if j["id"] == job_id]
        if job["state"] != leave or time.monotonic() > deadline:
            return job
        time.sleep(1)


def test_fresh_data_dir_discovers_jobs_and_their_recorded_state(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    inv = cluster.inventory_path
    launched = dc(
        tmp_path / "laptop", "launch", str(inv), "--kind", "ddp", "--gpus-per-host", "1",
        "--name", "found", "--detach", "--", "example:ddp", "--steps", "100000",
        "--sleep", "0.05",
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    job_id = launched.stdout.strip()
    leader = job_dir(cluster, 0, job_id)
    document = json.loads((leader / "job.json").read_text())
    assert document["id"] == job_id and document["hosts"] == ["node0", "node1"]
    assert document["spec"]["kind"] == "ddp" and document["plan"]["world_size"] == 2

    other = tmp_path / "other-laptop"  # an empty history
    [job] = jobs_json(other, inv)
    assert (job["id"], job["name"], job["kind"], job["hosts"]) == (
        job_id, "found", "ddp", ["node0", "node1"],
    )  # fmt: skip
    assert job["state"] == "running" and not job["unsupervised"]

    # The supervisor dies while the ranks run on: killed for real when the job has
    # one (console/hostprogs/supervisor/program.py), else its pid file names a dead process.
    for host in (0, 1):
        # A follower's supervisor files carry its host's name (homes may be shared).
        name = "supervisor.pid" if host == 0 else f"supervisor.node{host}.pid"
        pid_file = job_dir(cluster, host, job_id) / name
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        else:
            dead = subprocess.Popen(["true"])
            dead.wait()
            write_as_host(cluster, host, pid_file, f"{dead.pid}\n")
    [job] = jobs_json(other, inv)
    assert job["state"] == "unsupervised" and job["unsupervised_hosts"] == ["node0", "node1"]
    stopped = dc(other, "stop", str(inv), job_id, "--grace", "2")
    assert stopped.returncode == 0, stopped.stderr

    # A job whose leader's supervisor recorded a failure (the record as the contract
    # has it, in a job directory of its own): its state and first failure are the
    # record's, read by a console that never saw the job.
    recorded = job_id.replace("found-", "recorded-")
    copy = job_dir(cluster, 0, recorded)
    copy.mkdir()
    os.chown(copy, cluster.hosts[0].uid, cluster.hosts[0].gid)
    text = (leader / "job.json").read_text().replace(job_id, recorded)
    write_as_host(cluster, 0, copy / "job.json", text)
    now = time.time()
    record = {
        "v": 1, "host": "node0", "leader": True, "pid": 1, "heartbeat": now,
        "state": "failed", "started_at": document["created_at"], "ended_at": now,
        "first_failure": {
            "host": "node1", "process": "torchrun-1", "rank": 1, "exit_code": 3,
            "signal": None, "lines": ["RuntimeError: rank 1 crashed"], "at": now,
        },
        "hang": None,
        "processes": {"torchrun-0": {"rank": 0, "exit_code": None, "signal": "SIGTERM",
                                     "ended_at": now}},
    }  # fmt: skip
    write_as_host(cluster, 0, copy / "supervisor.json", json.dumps(record))
    fresh = tmp_path / "third-laptop"
    [job] = [j for j in jobs_json(fresh, inv) if j["id"] == recorded]
    assert job["state"] == "failed" and job["first_failure"]["rank"] == 1
    assert job["failure"].startswith("node1 torchrun-1 (rank 1) failed: exit status 3")
    listed = dc(fresh, "jobs", str(inv))
    assert f"{recorded}: node1 torchrun-1 (rank 1) failed: exit status 3" in listed.stdout


def test_report_of_a_failed_and_a_succeeded_job(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    inv = str(cluster.inventory_path)
    data = tmp_path / "data"
    failed = dc(
        data, "launch", inv, "--kind", "ddp", "--gpus-per-host", "1", "--name", "crashes",
        "--", "example:ddp", "--steps", "300", "--sleep", "0.05",
        "--crash-rank", "1", "--crash-at-step", "2",
    )  # fmt: skip
    assert failed.returncode == 1, failed.stderr
    [job] = jobs_json(data, cluster.inventory_path)
    out = tmp_path / "report-failed"
    # Another machine's console: the job is discovered from the hosts' job.json.
    made = dc(tmp_path / "elsewhere", "report", inv, job["id"], "--out", str(out))
    assert made.returncode == 0, made.stderr
    summary = (out / "summary.txt").read_text()
    assert made.stdout == summary
    assert summary.startswith(f"job {job['id']} (crashes), ddp, 2 ranks on node0, node1\n")
    assert "state: failed" in summary
    assert "node1 torchrun-1 (rank 1) failed: exit status" in summary, summary
    assert re.search(r"node1 torchrun-1( rank 1)?: exit 1", summary), summary
    plan = json.loads((out / "plan.json").read_text())
    assert plan["job_id"] == job["id"] and plan["world_size"] == 2
    wrapper = (out / "hosts" / "node1" / "torchrun-1.sh").read_text()
    assert "torchrun" in wrapper and "--crash-rank" in wrapper, wrapper
    assert "rank 1 step 1/300" in (out / "hosts" / "node1" / "torchrun-1.out").read_text()
    assert "crash" in (out / "hosts" / "node1" / "torchrun-1.err").read_text().lower()
    assert (out / "hosts" / "node0" / "job.json").exists()
    assert not list(out.rglob("*.secret"))

    ok = dc(
        data, "launch", inv, "--kind", "ddp", "--gpus-per-host", "1", "--name", "fine",
        "--", "example:ddp", "--steps", "3",
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    fine = next(j for j in jobs_json(data, cluster.inventory_path) if j["name"] == "fine")
    out_ok = tmp_path / "report-ok"
    made = dc(data, "report", inv, fine["id"], "--out", str(out_ok))
    assert made.returncode == 0, made.stderr
    summary = (out_ok / "summary.txt").read_text()
    assert "state: succeeded" in summary and "failure" not in summary, summary
    assert re.search(r"node0 torchrun-0( rank 0)?: exit 0", summary), summary
    assert re.search(r"node1 torchrun-1( rank 1)?: exit 0", summary), summary


def test_report_of_an_unknown_job_names_where_it_looked(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=1)
    made = dc(tmp_path, "report", str(cluster.inventory_path), "nosuch-20260101-000000-abcdef")
    assert made.returncode == 2
    assert "no job 'nosuch-20260101-000000-abcdef'" in made.stderr
    assert "job directories of node0" in made.stderr
