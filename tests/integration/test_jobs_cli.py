"""``distconsole launch | jobs | stop`` and ``check --preflight`` as real processes over
real sshd hosts; the job history lives in a temporary DISTCONSOLE_DATA_DIR."""

from __future__ import annotations

import json
import os
import pwd
import re
import signal
import socket
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


def cli_env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, DISTCONSOLE_DATA_DIR=str(tmp_path / "data"))


def dc(tmp_path: Path, *args: str, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], env=cli_env(tmp_path), capture_output=True, text=True, timeout=timeout
    )


def live_processes(cluster: SshdCluster) -> dict[str, list[str]]:
    """Each host user's live processes (no zombies, no sshd sessions)."""
    found: dict[str, list[str]] = {}
    for host in cluster.hosts:
        out = subprocess.run(
            ["ps", "-u", host.user, "-o", "stat=,args="], capture_output=True, text=True
        ).stdout
        rows = [
            line.strip()
            for line in out.splitlines()
            if not line.strip().startswith("Z") and "sshd:" not in line
        ]
        if rows:
            found[host.name] = rows
    return found


def assert_nothing_left(cluster: SshdCluster) -> None:
    deadline = time.monotonic() + 3
    while live_processes(cluster) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_processes(cluster) == {}


def jobs_json(tmp_path: Path, inventory: Path) -> list[dict[str, Any]]:
    result = dc(tmp_path, "jobs", str(inventory), "--json")
    assert result.returncode == 0, result.stderr
    data: list[dict[str, Any]] = json.loads(result.stdout)
    return data


def test_launch_streams_prefixed_output_and_exits_0(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    inv = str(cluster.inventory_path)
    result = dc(
        tmp_path, "launch", inv, "--kind", "ddp", "--gpus-per-host", "1",
        "--name", "cli-ddp", "--", "example:ddp", "--steps", "3",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for host, rank in (("node0", 0), ("node1", 1)):
        assert any(
            line.startswith(f"[{host} r{rank}] rank {rank} params_checksum=") for line in lines
        ), result.stdout[-3000:]
    assert all(line.startswith("[node") for line in lines if line), "unprefixed output"
    assert "succeeded" in result.stderr
    # The flight recorder's size under torch 2.13's name: no rank warns of the old one.
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated" not in result.stdout + result.stderr
    jobs = jobs_json(tmp_path, cluster.inventory_path)
    assert [(j["name"], j["kind"], j["state"], j["hosts"]) for j in jobs] == [
        ("cli-ddp", "ddp", "succeeded", ["node0", "node1"])
    ]
    assert_nothing_left(cluster)


def test_launch_of_a_failing_job_exits_1_naming_the_root_cause(sshd_cluster, tmp_path) -> None:
    """2 hosts x 2 ranks, rank 2 exits 3: its peers then fail in their collectives, but
    the summary names rank 2 (torchrun's own root cause), how it ended and when, with its
    own last lines; the ranks that failed after it are listed after it."""
    cluster = sshd_cluster(n=2)
    result = dc(
        tmp_path, "launch", str(cluster.inventory_path), "--kind", "ddp", "--gpus-per-host",
        "2", "--", "example:ddp", "--steps", "300", "--sleep", "0.05",
        "--crash-rank", "2", "--crash-at-step", "5",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert re.search(r"node1 torchrun-1 \(rank 2\) failed: exit status [1-9]", result.stderr), (
        result.stderr
    )
    assert re.search(r"root cause: rank 2 on \S+: exit status 3 at \d{4}-\d\d-\d\d_", result.stderr)
    cause = result.stderr.split("root cause:", 1)[1].split("last lines of its output:")[0]
    assert "[default0]:rank 2 crashing at step 5 as asked" in cause, result.stderr
    assert "[default1]" not in cause and "ChildFailedError" not in cause, result.stderr
    assert "last lines of its output:" in result.stderr
    [job] = jobs_json(tmp_path, cluster.inventory_path)
    assert job["state"] == "failed" and "root cause: rank 2" in job["failure"]
    assert_nothing_left(cluster)


def test_detached_job_is_reattached_by_a_new_process(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    launched = dc(
        tmp_path, "launch", str(cluster.inventory_path), "--kind", "ddp", "--gpus-per-host",
        "1", "--detach", "--", "example:ddp", "--steps", "40", "--sleep", "0.1",
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    job_id = launched.stdout.strip()
    # The launching process is gone; the job runs on without it.
    jobs = jobs_json(tmp_path, cluster.inventory_path)
    assert [(j["id"], j["state"]) for j in jobs] == [(job_id, "running")]
    assert live_processes(cluster).keys() == {"node0", "node1"}
    # Once the leader's supervisor has recorded the end (read here: a jobs --json every
    # second is CPU the ranks wait for), a new process reads the job succeeded.
    record = leader_job_dir(cluster, job_id) / "supervisor.json"
    deadline = time.monotonic() + TIMEOUT_S
    while not json_field(record, "ended_at") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [j["state"] for j in jobs_json(tmp_path, cluster.inventory_path)] == ["succeeded"]
    assert_nothing_left(cluster)


def leader_job_dir(cluster: SshdCluster, job_id: str) -> Path:
    """node0's job directory (work_dir ~/distconsole): the leader's supervisor files."""
    home = pwd.getpwnam(cluster.host("node0").user).pw_dir
    return Path(home) / "distconsole" / ".distconsole" / "jobs" / job_id


def json_field(path: Path, key: str) -> Any:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data.get(key) if isinstance(data, dict) else None


def test_ctrl_c_stops_the_job_on_every_host_and_exits_130(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    proc = subprocess.Popen(
        [
            *CLI, "launch", str(cluster.inventory_path), "--kind", "ddp", "--gpus-per-host",
            "1", "--grace", "5", "--", "example:ddp", "--steps", "100000", "--sleep", "0.05",
        ],
        env=cli_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if re.match(r"\[node1 r1\] rank 1 step 2/", line):
                break
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted: stopping job" in err
    assert "nothing of the job remains" in err
    assert [j["state"] for j in jobs_json(tmp_path, cluster.inventory_path)] == ["stopped"]
    assert_nothing_left(cluster)


def test_stop_command_leaves_nothing_and_exits_0(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    inv = str(cluster.inventory_path)
    launched = dc(
        tmp_path, "launch", inv, "--kind", "ps", "--ps", "1", "--workers", "2", "--detach",
        "--", "example:ps", "--steps", "100000", "--sleep", "0.05",
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    job_id = launched.stdout.strip()
    assert live_processes(cluster).keys() == {"node0", "node1"}
    stopped = dc(tmp_path, "stop", inv, job_id, "--grace", "3")
    assert stopped.returncode == 0, stopped.stderr
    assert "nothing of the job remains" in stopped.stdout
    assert [j["state"] for j in jobs_json(tmp_path, cluster.inventory_path)] == ["stopped"]
    assert_nothing_left(cluster)


def test_bad_input_exits_2_naming_the_option(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=1)
    inv = str(cluster.inventory_path)
    cases = [
        (["launch", inv, "--kind", "ddp", "--gpus-per-host", "0", "--", "x"], "--gpus-per-host"),
        (["launch", inv, "--kind", "ddp", "--grace", "soon", "--", "x"], "--grace"),
        (["launch", inv, "--kind", "ddp", "--hosts", "nosuch", "--", "x"], "--hosts"),
        (["launch", inv, "--kind", "ddp"], "PROGRAM"),
        (["stop", inv, "no-such-job"], "JOB_ID"),
        (["stop", inv, "../etc"], "JOB_ID"),
    ]
    for argv, option in cases:
        result = dc(tmp_path, *argv, timeout=60)
        assert result.returncode == 2, (argv, result.stderr)
        assert option in result.stderr, (argv, result.stderr)
    assert live_processes(cluster) == {}


def test_failing_preflight_stops_the_launch(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    inv = str(cluster.inventory_path)
    node0 = cluster.host("node0")
    with socket.socket() as busy:
        busy.bind((node0.address, 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = dc(
            tmp_path, "launch", inv, "--kind", "ddp", "--gpus-per-host", "1",
            "--master-port", str(port), "--interface", "nosuch0", "--", "example:ddp",
        )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert f"master port {port} is in use" in result.stderr
    assert "network interface nosuch0 not found" in result.stderr
    assert "--skip-preflight" in result.stderr
    assert jobs_json(tmp_path, cluster.inventory_path) == []
    assert not (node0.home / "distconsole" / ".distconsole").exists()
    assert live_processes(cluster) == {}

    checked = dc(tmp_path, "check", inv, "--preflight", "--json", timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    assert report["ok"] is True
    assert {h["packages"]["torch"] for h in report["hosts"].values()} != {None}


def test_a_job_stopped_from_another_console_reads_stopped_not_failed(
    sshd_cluster, tmp_path
) -> None:
    # `launch` watches the job while `distconsole stop` (another process, as from a second
    # terminal) stops it: the ranks die of SIGTERM, which must read as stopped, with no
    # failure and no traceback, in the watching console and in the history.
    cluster = sshd_cluster(n=2)
    inv = str(cluster.inventory_path)
    proc = subprocess.Popen(
        [
            *CLI, "launch", inv, "--kind", "ddp", "--gpus-per-host", "1", "--grace", "5",
            "--", "example:ddp", "--steps", "100000", "--sleep", "0.05",
        ],
        env=cli_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if re.match(r"\[node1 r1\] rank 1 step 2/", line):
                break
        job_id = jobs_json(tmp_path, cluster.inventory_path)[0]["id"]
        stopped = dc(tmp_path, "stop", inv, job_id, "--grace", "5")
        assert stopped.returncode == 0, stopped.stderr
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    assert f"job {job_id} was stopped" in err
    assert "failed" not in err and "Traceback" not in err, err
    [job] = jobs_json(tmp_path, cluster.inventory_path)
    assert job["state"] == "stopped"
    assert not job.get("failure"), job
    assert_nothing_left(cluster)


def test_preflight_names_the_host_where_the_program_is_missing(sshd_cluster, tmp_path) -> None:
    # train.py is on node0 only (per-host homes, nothing synced): the launch is refused
    # before anything starts, naming node1, and a missing --workdir is named as such.
    cluster = sshd_cluster(n=2)
    inv = str(cluster.inventory_path)
    node0, node1 = cluster.host("node0"), cluster.host("node1")
    work = node0.home / "distconsole"
    work.mkdir(exist_ok=True)
    (work / "train.py").write_text("print('hello')\n")
    os.chown(work, node0.uid, node0.gid)
    os.chown(work / "train.py", node0.uid, node0.gid)
    result = dc(
        tmp_path, "launch", inv, "--kind", "ddp", "--gpus-per-host", "1", "--", "train.py",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    errors = [ln for ln in result.stderr.splitlines() if "train.py not found" in ln]
    assert len(errors) == 1 and "node1" in errors[0] and "node0" not in errors[0], result.stderr
    assert "nothing was started" in result.stderr
    assert not (node1.home / "distconsole" / ".distconsole").exists()

    missing_dir = dc(
        tmp_path, "launch", inv, "--kind", "ps", "--workdir", "~/nosuch", "--", "train.py",
    )  # fmt: skip
    assert missing_dir.returncode == 1, missing_dir.stderr
    assert "working directory ~/nosuch does not exist" in missing_dir.stderr
    assert "train.py not found" not in missing_dir.stderr  # one cause, said once
    assert jobs_json(tmp_path, cluster.inventory_path) == []
    assert live_processes(cluster) == {}
