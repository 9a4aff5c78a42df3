"""plan.ports.listen_ports: every port a job's processes listen on, by the host that
binds it, as the planners lay them out (what pre-flight checks free on each host). The
planned argv and TF_CONFIG are read back to show the two agree."""

from __future__ import annotations

import json

from console.inventory import Host, Inventory
from console.jobs.plan.placement import place
from console.jobs.plan.planner import plan
from console.jobs.plan.ports import ListenPort, listen_ports
from console.jobs.spec import make_spec

INVENTORY = Inventory(
    path="/srv/hosts.yaml",
    hosts=tuple(Host(name=f"n{i}", address=f"10.0.0.{i + 1}", gpus=2) for i in range(3)),
)
JOB_ID = "job-20231114-221320-0000"


def ports_of(**fields: object) -> dict[str, list[tuple[int, str]]]:
    spec = make_spec(master_port=4000, **fields)
    found = listen_ports(place(spec, INVENTORY, JOB_ID))
    return {host: [(p.port, p.what) for p in ports] for host, ports in found.items()}


def test_ddp_binds_the_master_port_on_the_master_only() -> None:
    assert ports_of(kind="ddp", program="example:ddp") == {"n0": [(4000, "master port")]}


def test_mpi_and_horovod_bind_no_planned_port() -> None:
    assert ports_of(kind="mpi", program="example:horovod") == {}
    assert ports_of(kind="horovod", program="example:horovod") == {}


def test_each_ps_task_binds_its_port_on_its_own_host() -> None:
    found = ports_of(kind="ps", program="example:ps", ps=2, workers=3)
    assert found == {
        "n0": [(4000, "ps 0's port"), (4003, "worker 1's port")],
        "n1": [(4001, "ps 1's port"), (4004, "worker 2's port")],
        "n2": [(4002, "worker 0's port")],
    }
    # The plan's TF_CONFIG puts each task where these say.
    spec = make_spec(kind="ps", program="example:ps", ps=2, workers=3, master_port=4000)
    job = plan(spec, INVENTORY, job_id=JOB_ID)
    for launch in job.launches:
        config = json.loads(launch.env["TF_CONFIG"])
        task = config["task"]
        port = int(config["cluster"][task["type"]][task["index"]].rpartition(":")[2])
        assert (port, f"{task['type']} {task['index']}'s port") in found[launch.host]


def test_ray_head_binds_four_ports_and_each_node_its_agent() -> None:
    found = ports_of(kind="ray", program="example:ray")
    assert found == {
        "n0": [
            (4000, "Ray GCS port"),
            (4001, "Ray dashboard port"),
            (4002, "Ray client server port"),
            (4003, "Ray dashboard agent port"),
        ],
        "n1": [(4004, "Ray dashboard agent port")],
        "n2": [(4005, "Ray dashboard agent port")],
    }
    spec = make_spec(kind="ray", program="example:ray", master_port=4000)
    job = plan(spec, INVENTORY, job_id=JOB_ID)
    for launch in job.launches:
        script = " ".join(launch.argv)
        for port, _what in found[launch.host]:
            assert str(port) in script, (launch.host, port)


def test_a_ray_dashboard_port_of_the_users_own_says_which_option_moves_it() -> None:
    spec = make_spec(kind="ray", program="example:ray", master_port=4000, ray_dashboard_port=8265)
    head = listen_ports(place(spec, INVENTORY, JOB_ID))["n0"]
    assert (
        ListenPort(8265, "Ray dashboard port", "choose another with --ray-dashboard-port") in head
    )
