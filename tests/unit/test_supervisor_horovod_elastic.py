"""--min-hosts under Horovod elastic, the supervisor's side: the policy's hosts without
a process of their own (``member_hosts``), Horovod's log read as it grows, and a real
leader supervisor (console/hostprogs/supervisor/program.py) that asks a failed worker's
host over ssh and takes it out of ``hosts_now`` when ssh cannot reach it; and the
leader's ``scaled-down`` / ``replaced`` notifications (ddp's and Horovod's)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from console.errors import JobSpecError
from console.hostprogs.supervisor.elastic import SvLogLines, sv_horovod_failed_host
from console.hostprogs.supervisor.notify import NOTIFY_DEFAULT_ON, NOTIFY_EVENTS
from console.hostprogs.supervisor.policy import HostSilent, JobPolicy, PolicyProcess, ProcessEnded
from console.hostprogs.supervisor.program import Supervisor
from console.jobs.spec import make_spec

LAUNCHER = PolicyProcess("node0", "horovodrun-0", "horovodrun", (0, 1, 2))


def horovod(min_hosts: int) -> JobPolicy:
    policy = JobPolicy([LAUNCHER], "horovod", max_restarts=2)
    policy.member_hosts = ["node0", "node1", "node2"]
    policy.min_hosts = min_hosts
    policy.master_host = "node0"
    return policy


def test_a_lost_horovod_host_is_a_scale_down_though_it_runs_no_process() -> None:
    policy = horovod(2)
    assert policy.hosts == ["node0", "node1", "node2"]
    assert policy.feed(HostSilent("node2", "host lost: ssh refused", 10.0)) is False
    assert policy.verdict is None and policy.hosts_now == ["node0", "node1"]
    [down] = policy.scale_downs
    assert (down["host"], down["cause"], down["hosts_total"]) == (
        "node2",
        "host lost: ssh refused",
        3,
    )
    # Told again (the console's lost-hosts note too): nothing more happens.
    assert policy.feed(HostSilent("node2", "again", 11.0)) is False and len(policy.scale_downs) == 1
    assert policy.feed(ProcessEnded("node0", "horovodrun-0", 0, 20.0)) is False
    assert policy.over and policy.state == "succeeded"


def test_below_min_hosts_the_horovod_job_fails_and_says_why() -> None:
    policy = horovod(2)
    policy.feed(HostSilent("node2", "host lost", 10.0))
    assert policy.feed(HostSilent("node1", "host lost", 11.0)) is True  # stop horovodrun
    assert policy.state == "failed" and policy.first_failure is not None
    assert "1 of 3 hosts left, below --min-hosts 2" in policy.first_failure.reason
    # Without --min-hosts (no member hosts known) a host with no process changes nothing.
    plain = JobPolicy([LAUNCHER], "horovod", max_restarts=2)
    assert plain.feed(HostSilent("node2", "host lost", 10.0)) is False and plain.verdict is None


def test_horovods_log_names_the_failed_workers_host() -> None:
    assert sv_horovod_failed_host("INFO:root:record state: 127.0.0.12[0] = FAILURE") == "127.0.0.12"
    assert sv_horovod_failed_host("INFO:root:blacklist failing host: node2") == "node2"
    assert sv_horovod_failed_host("INFO:root:record state: 127.0.0.11[0] = READY") is None


def test_log_lines_are_read_once_as_the_file_grows(tmp_path: Path) -> None:
    path = tmp_path / "horovodrun-0.err"
    reader = SvLogLines([str(path), str(tmp_path / "absent.out")])
    assert reader.lines() == []
    path.write_text("one\ntw")
    assert reader.lines() == ["one"]
    with path.open("a") as handle:
        handle.write("o\nthree\n")
    assert reader.lines() == ["two", "three"] and reader.lines() == []
    path.write_text("new\n")  # written anew (shorter): read from its start
    assert reader.lines() == ["new"]


def test_the_new_events_can_be_asked_for_but_are_not_the_default() -> None:
    assert {"scaled-down", "replaced"} <= set(NOTIFY_EVENTS)
    assert not {"scaled-down", "replaced"} & set(NOTIFY_DEFAULT_ON)
    spec = make_spec(kind="ddp", program="t.py", notify_on="failed,scaled-down,replaced")
    assert spec.notify_on == ("failed", "scaled-down", "replaced")
    with pytest.raises(JobSpecError, match="unknown event 'scale-down'"):
        make_spec(kind="ddp", program="t.py", notify_on="scale-down")


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def leader(tmp_path: Path, *, min_hosts: int) -> Supervisor:
    """A real leader supervisor of a Horovod elastic job: node0 runs horovodrun-0;
    Horovod names node1 127.0.0.2 and node2 127.0.0.3, reached on a closed port."""
    config = {
        "job_id": "j-1",
        "host": "node0",
        "leader": "node0",
        "kind": "horovod",
        "max_restarts": 2,
        "min_hosts": min_hosts,
        "processes": [{"host": "node0", "name": "horovodrun-0", "role": "horovodrun"}],
    }
    (tmp_path / "supervisor-config.json").write_text(json.dumps(config))
    (tmp_path / "supervisor.secret").write_text("00" * 32)
    hosts = [{"name": f"node{i}", "horovod": f"127.0.0.{i + 1}", "slots": 1} for i in range(3)]
    (tmp_path / "horovod-hosts.json").write_text(
        json.dumps({"hosts": hosts, "ssh_port": str(closed_port())})
    )
    return Supervisor(str(tmp_path))


def events(tmp_path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]


def test_a_failed_workers_host_that_ssh_cannot_reach_leaves_the_job(tmp_path: Path) -> None:
    sv = leader(tmp_path, min_hosts=2)
    sv.horovod_watch()
    assert sv.policy.hosts_now == ["node0", "node1", "node2"]
    assert sv.elastic_record()["hosts_now"] == ["node0", "node1", "node2"]
    log = tmp_path / "horovodrun-0.err"
    log.write_text(
        "INFO:root:record state: 127.0.0.2[0] = READY\n"
        "INFO:root:record state: 127.0.0.3[0] = FAILURE\n"
        "INFO:root:blacklist failing host: 127.0.0.3\n"
    )
    deadline = time.monotonic() + 20
    while sv.policy.hosts_now != ["node0", "node1"]:
        assert time.monotonic() < deadline, events(tmp_path)
        sv.horovod_watch()
        time.sleep(0.05)
    sv.check_membership()  # each heartbeat: the scale-down's event
    [down] = sv.policy.scale_downs
    assert down["host"] == "node2" and "ssh from node0 cannot reach it (ssh: " in down["cause"]
    assert "record state: 127.0.0.3[0] = FAILURE" in down["cause"], down
    assert sv.policy.verdict is None
    # The drop of a lost host is no restart (restart.py counts the others).
    assert sv.horovod_dropped() == {"127.0.0.3"}
    names = [(e["event"], e.get("peer")) for e in events(tmp_path)]
    assert ("scaled-down", "node2") in names and ("horovod-host-asked", "node2") in names
    sv.write(force=True)
    record = json.loads((tmp_path / "supervisor.json").read_text())
    assert record["hosts_now"] == ["node0", "node1"] and record["hosts_total"] == 3


def test_a_lost_host_below_min_hosts_stops_the_job(tmp_path: Path) -> None:
    sv = leader(tmp_path, min_hosts=3)
    (tmp_path / "horovodrun-0.err").write_text("INFO:root:blacklist failing host: 127.0.0.2\n")
    deadline = time.monotonic() + 20
    while sv.policy.verdict is None:
        assert time.monotonic() < deadline, events(tmp_path)
        sv.horovod_watch()
        time.sleep(0.05)
    assert sv.policy.verdict == "failed" and not sv.policy.scale_downs
    failure = sv.policy.first_failure
    assert failure is not None and failure.host == "node1"
    assert "2 of 3 hosts left, below --min-hosts 3" in failure.reason


def test_the_consoles_lost_host_note_takes_a_horovod_host_out(tmp_path: Path) -> None:
    sv = leader(tmp_path, min_hosts=2)
    sv.horovod_watch()
    (tmp_path / "lost-hosts").mkdir()
    (tmp_path / "lost-hosts" / "node1").write_text("the host does not answer")
    sv.check_silence()
    assert sv.policy.hosts_now == ["node0", "node2"], events(tmp_path)
    [down] = sv.policy.scale_downs
    assert down["cause"] == "connection lost (the host does not answer)"


def test_the_leader_notifies_a_scale_down_and_a_replacement(tmp_path: Path) -> None:
    """A ddp leader with a spare (node3): node2 lost, node3 joined; with --notify-on
    scaled-down,replaced its notify command runs once for each (the real notifier)."""
    procs = [
        {
            "host": f"node{i}",
            "name": f"torchrun-{i}",
            "role": "torchrun",
            "ranks": [i] if i < 3 else [],
        }
        for i in range(4)
    ]
    config = {
        "job_id": "j-2",
        "host": "node0",
        "leader": "node0",
        "kind": "ddp",
        "max_restarts": 2,
        "min_hosts": 2,
        "processes": procs,
        "notify": {
            "command": 'echo "$DISTCONSOLE_EVENT $DISTCONSOLE_HOST: $DISTCONSOLE_REASON" >>told',
            "on": ["scaled-down", "replaced"],
        },
    }
    (tmp_path / "supervisor-config.json").write_text(json.dumps(config))
    (tmp_path / "supervisor.secret").write_text("00" * 32)
    sv = Supervisor(str(tmp_path))
    assert sv.policy.spare_hosts == ["node3"] and sv.policy.min_hosts == 2
    sv.silent("node2", "connection lost")
    assert sv.policy.spare_joined("node3", time.time())
    sv.check_membership()
    sv.notifier.drain(30)
    told = (tmp_path / "told").read_text().splitlines()
    assert sorted(told) == [
        "replaced node3: spare node3 joined: 3 of 3 hosts",
        "scaled-down node2: node2 left (connection lost); 2 of 3 hosts went on",
    ], told
