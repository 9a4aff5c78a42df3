"""PS planner: one process per task, round-robin placement, TF_CONFIG per task."""

from __future__ import annotations

import json

import pytest

from console.errors import PlanError
from console.inventory import Host, Inventory
from console.jobs.models import JobKind, LogFile
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec

JOB = "job-3"
JD = "~/distconsole/.distconsole/jobs/job-3"


def inventory(n: int = 2) -> Inventory:
    return Inventory(
        path="hosts.yaml",
        hosts=tuple(Host(name=f"n{i}", address=f"10.0.0.{i + 1}") for i in range(n)),
    )


def test_one_ps_two_workers_on_two_hosts() -> None:
    spec = make_spec(
        kind="ps",
        program="trainer.py",
        args=["--steps", "{steps_per_rank}"],
        ps=1,
        workers=2,
        master_port=4000,
        total_steps=9,
        env={"U": "1"},
    )
    p = plan(spec, inventory(), job_id=JOB)
    assert p.kind is JobKind.PS
    assert p.world_size == 3
    assert [(x.host, x.role, x.index) for x in p.launches] == [
        ("n0", "ps", 0),
        ("n1", "worker", 0),
        ("n0", "worker", 1),
    ]
    cluster = {"ps": ["10.0.0.1:4000"], "worker": ["10.0.0.2:4001", "10.0.0.1:4002"]}
    worker1 = p.launches[2]
    assert worker1.argv == ("python3", "trainer.py", "--steps", "4")
    assert worker1.env == {
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "U": "1",
        "DISTCONSOLE_JOB_ID": JOB,
        "DISTCONSOLE_JOB_DIR": JD,
        "DISTCONSOLE_CHECKPOINT_DIR": f"{JD}/checkpoints",
        "DISTCONSOLE_WORLD_SIZE": "2",
        "DISTCONSOLE_TOTAL_STEPS": "9",
        "DISTCONSOLE_STEPS_PER_RANK": "4",
        "DISTCONSOLE_TASK_TYPE": "worker",
        "DISTCONSOLE_TASK_INDEX": "1",
        "DISTCONSOLE_HANG_HOOK": f"{JD}/python",  # hang detection is on by default
        "TF_CONFIG": '{"cluster":{"ps":["10.0.0.1:4000"],"worker":["10.0.0.2:4001",'
        '"10.0.0.1:4002"]},"task":{"type":"worker","index":1}}',
    }
    for launch in p.launches:
        config = json.loads(launch.env["TF_CONFIG"])
        assert config == {"cluster": cluster, "task": {"type": launch.role, "index": launch.index}}
    assert worker1.log_paths == (
        LogFile(f"{JD}/worker-1.out", "stdout", "worker", index=1),
        LogFile(f"{JD}/worker-1.err", "stderr", "worker", index=1),
    )
    assert (p.steps_per_rank, p.steps_dropped) == (4, 1)


def test_chief_and_several_ps_round_robin_on_three_hosts() -> None:
    spec = make_spec(kind="ps", program="example:ps", ps=2, workers=3, chief=True, master_port=5000)
    p = plan(spec, inventory(3), job_id=JOB)
    assert [(x.role, x.index, x.host) for x in p.launches] == [
        ("ps", 0, "n0"),
        ("ps", 1, "n1"),
        ("chief", 0, "n2"),
        ("worker", 0, "n0"),
        ("worker", 1, "n1"),
        ("worker", 2, "n2"),
    ]
    config = json.loads(p.launches[2].env["TF_CONFIG"])
    assert config["cluster"] == {
        "ps": ["10.0.0.1:5000", "10.0.0.2:5001"],
        "worker": ["10.0.0.1:5003", "10.0.0.2:5004", "10.0.0.3:5005"],
        "chief": ["10.0.0.3:5002"],
    }
    assert config["task"] == {"type": "chief", "index": 0}
    assert p.launches[0].argv == ("python3", f"{JD}/example_ps.py")
    assert {u.host for u in p.uploads} == {"n0", "n1", "n2"}
    examples = [u for u in p.uploads if u.package == "console.examples"]
    assert all(u.resource == "ps_train.py" for u in examples) and len(examples) == 3


def test_defaults_one_ps_and_one_worker_per_host() -> None:
    p = plan(make_spec(kind="ps", program="t.py"), inventory(3), job_id=JOB)
    roles = [x.role for x in p.launches]
    assert roles == ["ps", "worker", "worker", "worker"]
    ports = [
        int(json.loads(x.env["TF_CONFIG"])["cluster"]["ps"][0].split(":")[1]) for x in p.launches
    ]
    assert len(set(ports)) == 1 and p.master_port == ports[0]


def test_tasks_on_one_host_get_distinct_ports() -> None:
    p = plan(make_spec(kind="ps", program="t.py", ps=2, workers=4), inventory(1), job_id=JOB)
    cluster = json.loads(p.launches[0].env["TF_CONFIG"])["cluster"]
    addresses = cluster["ps"] + cluster["worker"]
    assert len(set(addresses)) == 6
    assert all(a.startswith("10.0.0.1:") for a in addresses)


def test_unused_hosts_are_left_out_with_a_warning() -> None:
    p = plan(make_spec(kind="ps", program="t.py", ps=1, workers=1), inventory(3), job_id=JOB)
    assert p.hosts_involved == ("n0", "n1")
    assert set(p.job_dirs) == {"n0", "n1"}
    assert any("n2 get no task" in w for w in p.warnings)


def test_ports_past_65535_are_refused() -> None:
    spec = make_spec(kind="ps", program="t.py", workers=5, master_port=65533)
    with pytest.raises(PlanError, match="--master-port"):
        plan(spec, inventory(), job_id=JOB)
