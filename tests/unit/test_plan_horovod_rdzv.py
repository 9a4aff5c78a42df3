"""Horovod elastic with a rendezvous host (issue 31 item 3): horovodrun and the leader on
the rendezvous host with no slot of its own, the discovery script listing the training
hosts only."""

from __future__ import annotations

import json
from pathlib import Path

from console.hostprogs.supervisor.policy import HostSilent, JobPolicy, PolicyProcess
from console.inventory import Inventory, load
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec

HOSTS = """\
defaults: {gpus: 1, user: u}
hosts:
  - {name: node0, address: 10.0.0.1}
  - {name: node1, address: 10.0.0.2}
  - {name: node2, address: 10.0.0.3}
  - {name: node3, address: 10.0.0.4, user: %s}
"""


def inventory(tmp_path: Path, rdzv_user: str = "u") -> Inventory:
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS % rdzv_user)
    return load(path)


def spec(**extra: object):  # type: ignore[no-untyped-def]
    fields: dict[str, object] = {
        "kind": "horovod", "program": "example:horovod", "max_restarts": 2,
        "horovod_elastic": True, "min_hosts": 2, "rendezvous_host": "node3",
    }  # fmt: skip
    fields.update(extra)
    return make_spec(**fields)


def test_horovodrun_runs_on_the_rendezvous_host_with_no_slot_of_its_own(tmp_path: Path) -> None:
    planned = plan(spec(), inventory(tmp_path), job_id="job-1")
    [driver] = planned.launches
    assert driver.host == "node3" and driver.role == "horovodrun", driver
    assert planned.rendezvous_host == "node3" and planned.master_addr == "10.0.0.4"
    assert planned.hosts_involved == ("node0", "node1", "node2")
    assert driver.ranks == (0, 1, 2) and planned.world_size == 3
    script = driver.argv[2]
    assert "--min-np 2 --max-np 3" in script
    # The discovery script and the hosts file name the training hosts only.
    hosts_file = script[script.index('{"hosts": ') : script.index('"ssh_port"')]
    assert [h["name"] for h in json.loads(hosts_file + '"x": 0}')["hosts"]] == [
        "node0",
        "node1",
        "node2",
    ]
    assert "node0=10.0.0.1:1 node1=10.0.0.2:1 node2=10.0.0.3:1" in script
    assert "10.0.0.4" not in script
    line = next(n for n in planned.notes if n.startswith("rendezvous host: node3"))
    assert "no slots of its own" in line and "losing node3 ends the job" in line
    assert not any(n.startswith("Losing node0 ends the job") for n in planned.notes)


def test_a_rendezvous_host_of_another_user_makes_the_driver_name_hosts_by_alias(
    tmp_path: Path,
) -> None:
    """The driver's ssh logs in as its own user: when that differs from the training
    hosts' one, -H and the discovery script name hosts by their ~/.ssh/config alias."""
    planned = plan(spec(), inventory(tmp_path, rdzv_user="other"), job_id="job-1")
    script = planned.launches[0].argv[2]
    assert "node0=node0:1 node1=node1:1 node2=node2:1" in script
    assert any("node3 reaches each by its inventory name" in w for w in planned.warnings)


def test_the_drivers_host_is_no_training_host_of_the_policy() -> None:
    """The leader's policy (supervisor/policy.py): horovodrun-0 on node3, Horovod's hosts
    node0..node2; losing node0, the first, is a scale-down like any other."""
    policy = JobPolicy([PolicyProcess("node3", "horovodrun-0", "horovodrun", (0, 1, 2))], "horovod")
    policy.member_hosts = ["node0", "node1", "node2"]
    policy.min_hosts = 2
    policy.master_host = "node3"
    assert policy.hosts == ["node0", "node1", "node2"]
    assert policy.feed(HostSilent("node0", "host lost", 10.0)) is False
    assert policy.verdict is None and policy.hosts_now == ["node1", "node2"]
    assert policy.scale_downs[0]["hosts_total"] == 3
