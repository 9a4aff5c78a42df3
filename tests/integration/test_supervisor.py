"""The host supervisors on real sshd hosts with their own users, no console running
after ``launch --detach``: fail-fast across hosts whose ranks share no collective, the PS
rule, a host killed mid-job, a long detached job and its stop, the job's secret, and a
supervisor killed while training runs on."""

from __future__ import annotations

import json
import os
import pwd
import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from sshd_cluster import SshdCluster

from console.hostprogs.guarded_listener import guarded_answer
from console.hostprogs.supervisor.wire import wire_pack
from tests.integration.test_jobs_cli import (
    CLI,
    assert_nothing_left,
    cli_env,
    dc,
    jobs_json,
    live_processes,
)

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

# Plain Python loops: the tasks share no collective, so nothing but the supervisors can
# stop the others when one fails. worker-1 exits 3 when CRASH is set: once the test
# writes CRASH_NOW in its job directory (crash_now), else after 3 s.
CRASH_NOW = "crash-now"
LOOP = (
    "import os, sys, time; "
    "me = os.environ['DISTCONSOLE_TASK_TYPE'] + '-' + os.environ['DISTCONSOLE_TASK_INDEX']; "
    "print('up', me, flush=True); "
    "crash = os.environ.get('CRASH') == '1' and me == 'worker-1'; "
    "now = os.path.join(os.path.expanduser(os.environ['DISTCONSOLE_JOB_DIR']), "
    f"'{CRASH_NOW}'); "
    "until = time.time() + 3; "
    "[time.sleep(0.05) for _ in iter(lambda: crash and not os.path.exists(now) "
    "and time.time() < until, False)]; "
    "print('crashing now', file=sys.stderr, flush=True) if crash else None; "
    "sys.exit(3) if crash else None; "
    "[time.sleep(0.2) for _ in iter(int, 1)]"
)


def launch_loops(
    tmp_path: Path, cluster: SshdCluster, *, workers: int = 2, crash: bool = False
) -> str:
    result = dc(
        tmp_path, "launch", str(cluster.inventory_path), "--kind", "ps", "--ps", "1",
        "--workers", str(workers), "--skip-preflight", "--detach",
        *(["--env", "CRASH=1"] if crash else []), "--", "python3", "-c", LOOP,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def crash_now(cluster: SshdCluster, job_id: str) -> None:
    """worker-1 of ``launch_loops(crash=True)`` crashes now (on whichever host it runs)."""
    for host in cluster.hosts:
        (job_dir(cluster, host.name, job_id) / CRASH_NOW).touch()


def job_dir(cluster: SshdCluster, host: str, job_id: str) -> Path:
    home = pwd.getpwnam(cluster.host(host).user).pw_dir
    return Path(home) / "distconsole" / ".distconsole" / "jobs" / job_id  # work_dir ~/distconsole


def wait_for(condition: Any, timeout: float = 60, step: float = 0.05) -> float:
    """Poll until ``condition()`` holds; returns when (monotonic). Fails on timeout."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(step)
    return time.time()


def events(cluster: SshdCluster, host: str, job_id: str) -> list[dict[str, Any]]:
    path = job_dir(cluster, host, job_id) / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def supervisor_pid(cluster: SshdCluster, host: str, job_id: str) -> int:
    """A follower's supervisor files carry its host's name (homes may be shared)."""
    name = "supervisor.pid" if host == "node0" else f"supervisor.{host}.pid"
    return int((job_dir(cluster, host, job_id) / name).read_text())


def peer_connected(cluster: SshdCluster, job_id: str, peer: str) -> bool:
    return any(
        e["event"] == "peer-connected" and e.get("peer") == peer
        for e in events(cluster, "node0", job_id)
    )


def commands(cluster: SshdCluster) -> dict[str, list[str]]:
    """Each host's live processes' command lines (without their changing state)."""
    return {
        host: sorted(row.split(None, 1)[-1] for row in rows)
        for host, rows in live_processes(cluster).items()
    }


def read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def test_a_crash_stops_every_host(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    job_id = launch_loops(tmp_path, cluster, crash=True)
    assert live_processes(cluster).keys() == {"node0", "node1"}
    crash_now(cluster, job_id)
    crashed = [
        d / "worker-1.exit"
        for d in (job_dir(cluster, h, job_id) for h in ("node0", "node1"))
        if (d / "worker-1.pgid").exists()
    ]
    assert len(crashed) == 1
    wait_for(crashed[0].exists, timeout=60)
    gone = wait_for(lambda: not live_processes(cluster))
    print(f"\nall gone {gone - crashed[0].stat().st_mtime:.2f} s after the crash (exit 3)")
    [job] = jobs_json(tmp_path, cluster.inventory_path)
    assert job["state"] == "failed"
    assert re.search(r"worker-1 failed: exit status 3", job["failure"]), job["failure"]
    assert "crashing now" in job["failure"]
    leader = json.loads((job_dir(cluster, "node0", job_id) / "supervisor.json").read_text())
    assert leader["state"] == "failed" and leader["first_failure"]["exit_code"] == 3


def test_ps_job_succeeds_and_its_ps_are_stopped(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    launched = dc(
        tmp_path, "launch", str(cluster.inventory_path), "--kind", "ps", "--ps", "1",
        "--workers", "2", "--detach", "--", "example:ps", "--steps", "20",
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    job_id = launched.stdout.strip()
    wait_for(lambda: not live_processes(cluster), timeout=120, step=0.5)
    [job] = jobs_json(tmp_path, cluster.inventory_path)
    assert job["state"] == "succeeded", job
    leader = json.loads((job_dir(cluster, "node0", job_id) / "supervisor.json").read_text())
    assert leader["state"] == "succeeded" and leader["ended_at"] is not None
    # The parameter server never ends by itself: the PS rule stopped it.
    [order] = [e for e in events(cluster, "node0", job_id) if e["event"] == "stop-ordered"]
    assert order["state"] == "succeeded"


def test_a_host_killed_mid_job_fails_launch_naming_it(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    proc = subprocess.Popen(
        [
            *CLI, "launch", str(cluster.inventory_path), "--kind", "ps", "--ps", "1",
            "--workers", "2", "--skip-preflight", "--grace", "3", "--", "python3", "-c", LOOP,
        ],
        env=cli_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if " running: " in line:
                break
        time.sleep(1)
        killed = time.monotonic()
        cluster.stop("node1")
        _out, err = proc.communicate(timeout=60)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"\nlaunch exited {proc.returncode} {took:.2f} s after node1 was killed")
    assert proc.returncode == 1, err
    assert "node1: connection lost (" in err, err
    assert "went away: \n" not in err
    # The surviving host's tasks were stopped, and its supervisor has left.
    wait_for(lambda: "node0" not in live_processes(cluster), timeout=15)
    [job] = jobs_json(tmp_path, cluster.inventory_path)
    assert job["state"] == "failed" and "node1" in job["failure"]
    cluster.start("node1")
    [job] = jobs_json(tmp_path, cluster.inventory_path)
    assert job["state"] == "failed"


def test_detached_job_runs_until_stopped(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    job_id = launch_loops(tmp_path, cluster, workers=3)
    for _ in range(3):
        assert [j["state"] for j in jobs_json(tmp_path, cluster.inventory_path)] == ["running"]
        time.sleep(1)
    stopped = dc(tmp_path, "stop", str(cluster.inventory_path), job_id, "--grace", "3")
    assert stopped.returncode == 0, stopped.stderr
    assert [j["state"] for j in jobs_json(tmp_path, cluster.inventory_path)] == ["stopped"]
    assert_nothing_left(cluster)
    leader = json.loads((job_dir(cluster, "node0", job_id) / "supervisor.json").read_text())
    assert leader["state"] == "stopped"


def test_wrong_secret_is_refused_and_a_dead_supervisor_leaves_training(
    sshd_cluster, tmp_path
) -> None:
    cluster = sshd_cluster(n=2)
    job_id = launch_loops(tmp_path, cluster)
    leader_dir = job_dir(cluster, "node0", job_id)
    port = int((leader_dir / "supervisor.port").read_text())
    secret = bytes.fromhex((leader_dir / "supervisor.secret").read_text().strip())
    assert (leader_dir / "supervisor.secret").stat().st_mode & 0o077 == 0
    forged = wire_pack(b"not the job's secret", job_id, {"type": "stop", "sender": "node1"})
    replayed = wire_pack(
        secret, job_id, {"type": "beat", "sender": "node1"}, now=time.time() - 3600
    )
    # Without the key no line is read past the challenge; with it (the proof answered),
    # the wire still refuses a forged or replayed line. The leader hangs up on each.
    for line, prove in ((forged, False), (forged, True), (replayed, True)):
        with socket.create_connection((cluster.host("node0").address, port), timeout=30) as sock:
            challenge = sock.makefile("rb").readline()
            sock.sendall((guarded_answer(secret, job_id, challenge) or b"") if prove else b"")
            sock.sendall(line)
            sock.settimeout(30)
            assert sock.recv(100) == b""
    refused = [e for e in events(cluster, "node0", job_id) if e["event"] == "refused"]
    assert [e["why"] for e in refused] == [
        "no proof of the job's key",
        "bad signature (not this job's secret)",
        "stale or future timestamp (a replay, or clocks far apart)",
    ]
    assert [j["state"] for j in jobs_json(tmp_path, cluster.inventory_path)] == ["running"]
    # Every supervisor killed at once (frozen first, so none sees another go): training
    # runs on, and the job reads unsupervised.
    pids = [supervisor_pid(cluster, h, job_id) for h in ("node0", "node1")]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    wait_for(
        lambda: (
            not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids)
        )
    )
    assert live_processes(cluster).keys() == {"node0", "node1"}
    assert [j["state"] for j in jobs_json(tmp_path, cluster.inventory_path)] == ["unsupervised"]
    stopped = dc(tmp_path, "stop", str(cluster.inventory_path), job_id, "--grace", "3")
    assert stopped.returncode == 0, stopped.stderr
    assert_nothing_left(cluster)


def test_one_follower_supervisor_killed_leaves_the_job_running_unsupervised(
    sshd_cluster, tmp_path
) -> None:
    """Its connection closes (the host lives): the leader notes node1 unsupervised and
    stops nothing; a fresh console reads the job unsupervised on node1."""
    cluster = sshd_cluster(n=2)
    job_id = launch_loops(tmp_path, cluster)
    # Once node1's supervisor has joined the leader: killed before, it never connected,
    # which the leader takes for a lost host, not an unsupervised one.
    wait_for(lambda: peer_connected(cluster, job_id, "node1"))
    os.kill(supervisor_pid(cluster, "node1", job_id), signal.SIGKILL)
    leader_file = job_dir(cluster, "node0", job_id) / "supervisor.json"
    wait_for(lambda: "node1" in (read_json(leader_file).get("unsupervised") or {}))
    before = commands(cluster)  # the ranks of both hosts, less node1's supervisor
    assert before.keys() == {"node0", "node1"}
    assert not any("supervisor" in c for c in before["node1"]), before
    leader = read_json(leader_file)
    assert leader["state"] == "running", leader
    assert "connection closed" in leader["unsupervised"]["node1"]["why"]
    assert any(e["event"] == "peer-unsupervised" for e in events(cluster, "node0", job_id))
    # Beyond the silence limit (4 s) the ranks still run: not taken for a lost host.
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        assert commands(cluster) == before
        assert read_json(leader_file)["state"] == "running"
        time.sleep(0.5)
    [job] = jobs_json(tmp_path / "fresh", cluster.inventory_path)
    assert job["state"] == "unsupervised", job
    assert "node1" in json.dumps(job), job
    stopped = dc(tmp_path, "stop", str(cluster.inventory_path), job_id, "--grace", "3")
    assert stopped.returncode == 0, stopped.stderr
    assert_nothing_left(cluster)


def test_the_leaders_supervisor_killed_leaves_the_followers_running_unsupervised(
    sshd_cluster, tmp_path
) -> None:
    """The leader's connection closes (node0 lives): node1's supervisor notes its leader
    unsupervised, judges its own part alone and stops nothing; every rank runs on and a
    fresh console reads the job unsupervised on node0."""
    cluster = sshd_cluster(n=2)
    job_id = launch_loops(tmp_path, cluster)
    follower_file = job_dir(cluster, "node1", job_id) / "supervisor.node1.json"
    wait_for(lambda: read_json(follower_file).get("state") == "running")
    os.kill(supervisor_pid(cluster, "node0", job_id), signal.SIGKILL)
    wait_for(lambda: "node0" in (read_json(follower_file).get("unsupervised") or {}))
    before = commands(cluster)  # the ranks of both hosts and node1's supervisor
    assert before.keys() == {"node0", "node1"}
    follower_pid = supervisor_pid(cluster, "node1", job_id)
    assert psutil.pid_exists(follower_pid) and psutil.Process(follower_pid).status() != "zombie"
    follower = read_json(follower_file)
    assert follower["state"] == "running", follower
    # Beyond the silence limit (4 s) nothing is stopped: a closed connection is no loss.
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        assert commands(cluster) == before
        assert read_json(follower_file)["state"] == "running"
        time.sleep(0.5)
    [job] = jobs_json(tmp_path / "fresh", cluster.inventory_path)
    assert job["state"] == "unsupervised", job
    assert "node0" in json.dumps(job), job
    stopped = dc(tmp_path, "stop", str(cluster.inventory_path), job_id, "--grace", "3")
    assert stopped.returncode == 0, stopped.stderr
    assert_nothing_left(cluster)


def test_hosts_sharing_a_home_keep_their_supervisors_apart(sshd_cluster, tmp_path) -> None:
    """One account on both hosts (an NFS home): one job directory, each supervisor's
    files under its own names; the crash is recorded once, naming the host that ran it."""
    cluster = sshd_cluster(n=2, shared_account=True)
    job_id = launch_loops(tmp_path, cluster, crash=True)
    crash_now(cluster, job_id)
    shared = job_dir(cluster, "node0", job_id)
    assert shared == job_dir(cluster, "node1", job_id)
    wait_for(lambda: (shared / "worker-1.exit").exists())
    wait_for(lambda: not live_processes(cluster))
    wait_for(lambda: read_json(shared / "supervisor.json").get("ended_at") is not None)
    leader = read_json(shared / "supervisor.json")
    follower = read_json(shared / "supervisor.node1.json")
    assert (leader["host"], leader["leader"]) == ("node0", True)
    assert (follower["host"], follower["leader"]) == ("node1", False)
    ran_it = "node0" if "worker-1" in leader["processes"] else "node1"
    assert f"{'' if ran_it == 'node0' else 'node1/'}worker-1" in leader["processes"]
    failure = leader["first_failure"]
    assert leader["state"] == "failed", leader
    assert (failure["host"], failure["process"], failure["exit_code"]) == (ran_it, "worker-1", 3)
    assert {e["host"] for e in events(cluster, "node0", job_id)} == {"node0"}
    follower_events = [
        json.loads(x) for x in (shared / "events.node1.jsonl").read_text().splitlines()
    ]
    assert {e["host"] for e in follower_events} == {"node1"}
    [job] = jobs_json(tmp_path / "fresh", cluster.inventory_path)
    assert job["state"] == "failed", job
    assert "worker-1 failed: exit status 3" in job["failure"] and ran_it in json.dumps(job), job


# The workers end (exit 0) after a few seconds; the parameter server never does.
ENDING = (
    "import os, time; "
    "me = os.environ['DISTCONSOLE_TASK_TYPE'] + '-' + os.environ['DISTCONSOLE_TASK_INDEX']; "
    "print('up', me, flush=True); "
    "time.sleep(8) if me.startswith('worker') else [time.sleep(0.2) for _ in iter(int, 1)]; "
    "print('done', me, flush=True)"
)


def test_ends_on_an_unsupervised_host_reach_the_leader_through_the_console(
    sshd_cluster, tmp_path
) -> None:
    """node1 (worker-0) loses its supervisor; its worker then ends on its own. Only the
    console sees that: it tells the leader (``jobctl host-ended``), whose PS rule then
    ends the job succeeded. Without the note the leader waited on worker-0 for ever, and
    so did the attached launch."""
    cluster = sshd_cluster(n=2)
    proc = subprocess.Popen(
        [
            *CLI, "launch", str(cluster.inventory_path), "--kind", "ps", "--ps", "1",
            "--workers", "2", "--skip-preflight", "--grace", "3", "--", "python3", "-c", ENDING,
        ],
        env=cli_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if " running: " in line:
                break
        [job_id] = [p.name for p in (job_dir(cluster, "node0", "x").parent).iterdir()]
        leader_file = job_dir(cluster, "node0", job_id) / "supervisor.json"
        # Once node1's supervisor has joined the leader (before, its silence is a loss).
        wait_for(
            lambda: any(
                e["event"] == "peer-connected" and e.get("peer") == "node1"
                for e in events(cluster, "node0", job_id)
            )
        )
        os.kill(supervisor_pid(cluster, "node1", job_id), signal.SIGKILL)
        wait_for(lambda: "node1" in (read_json(leader_file).get("unsupervised") or {}))
        _out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    leader = read_json(leader_file)
    assert leader["state"] == "succeeded", leader
    told = [
        e for e in events(cluster, "node0", job_id)
        if e["event"] == "process-ended" and e.get("seen_by") == "console"
    ]  # fmt: skip
    assert [(e["peer"], e["name"]) for e in told] == [("node1", "worker-0")], told
    ended = job_dir(cluster, "node0", job_id) / "ended-hosts" / "node1.json"
    assert json.loads(ended.read_text())[0]["exit_code"] == 0
    # The PS rule stopped the parameter server, and the leader's supervisor has left.
    wait_for(lambda: not live_processes(cluster), timeout=15)


def test_a_detached_jobs_host_killed_with_a_fin_reads_lost_and_the_job_ends(
    sshd_cluster, tmp_path
) -> None:
    """node1 killed whole (sshd and every process of its user: the kernel closes their
    connections with a FIN), no console open. The leader alone cannot tell that from a
    supervisor that died on a live host (unsupervised); a console listing jobs can: node1
    does not answer either. The job reads lost, the survivors are told (jobctl host-lost),
    and their supervisors end it with node1 as the cause."""
    cluster = sshd_cluster(n=2)
    job_id = launch_loops(tmp_path, cluster)
    leader_file = job_dir(cluster, "node0", job_id) / "supervisor.json"
    wait_for(lambda: read_json(leader_file).get("state") == "running")
    # node1's supervisor must have met the leader: killed before, it reads "never
    # connected" (a start that failed), not a connection lost.
    wait_for(
        lambda: any(
            e["event"] == "peer-connected" and e.get("peer") == "node1"
            for e in events(cluster, "node0", job_id)
        )
    )
    cluster.stop("node1")
    wait_for(lambda: "node1" in (read_json(leader_file).get("unsupervised") or {}))
    [job] = jobs_json(tmp_path / "fresh", cluster.inventory_path)
    assert job["state"] == "lost", job
    assert "node1: connection lost" in (job["failure"] or ""), job
    wait_for(lambda: read_json(leader_file).get("state") == "failed", timeout=30)
    wait_for(lambda: "node0" not in live_processes(cluster), timeout=30)
    [job] = jobs_json(tmp_path / "fresh", cluster.inventory_path)
    assert job["state"] == "failed" and "node1" in (job["failure"] or ""), job
