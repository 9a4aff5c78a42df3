"""--min-hosts (ddp's elastic membership): the policy's scale-down rule
(console/hostprogs/supervisor/policy.py), torchrun's round read from its workers
(supervisor/elastic.py), and the options, plans and views that carry it."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.commands.parts.job_options import naming_options
from console.errors import JobSpecError, PlanError
from console.hostprogs.supervisor.elastic import sv_torchrun_round
from console.hostprogs.supervisor.policy import HostSilent, JobPolicy, PolicyProcess, ProcessEnded
from console.hostprogs.supervisor.source import supervisor_source
from console.inventory import Inventory, load
from console.jobs.history import hosts_now, membership
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.logs.curves import CurvePoint
from console.logs.file_steps import effective_training

DDP3 = [PolicyProcess(f"node{i}", f"torchrun-{i}", "torchrun", (i,)) for i in range(3)]


def elastic(min_hosts: int) -> JobPolicy:
    policy = JobPolicy(list(DDP3), "ddp", max_restarts=3)
    policy.min_hosts = min_hosts
    policy.master_host = "node0"
    return policy


def test_a_lost_host_above_min_hosts_scales_down_and_the_job_succeeds() -> None:
    policy = elastic(2)
    assert policy.feed(HostSilent("node2", "connection lost", 10.0)) is False
    assert policy.verdict is None and policy.first_failure is None
    assert policy.hosts_now == ["node0", "node1"]
    [down] = policy.scale_downs
    assert (down["host"], down["cause"], down["hosts_now"], down["hosts_total"]) == (
        "node2",
        "connection lost",
        ["node0", "node1"],
        3,
    )
    assert policy.feed(ProcessEnded("node1", "torchrun-1", 0, 20.0)) is False
    assert policy.feed(ProcessEnded("node0", "torchrun-0", 0, 20.0)) is False
    assert policy.over and policy.state == "succeeded"


def test_a_lost_host_below_min_hosts_fails_the_job_and_says_why() -> None:
    policy = elastic(2)
    policy.feed(HostSilent("node2", "connection lost", 10.0))
    # The second loss leaves one host: below --min-hosts 2, fail-fast as without it.
    assert policy.feed(HostSilent("node1", "connection lost", 11.0)) is True
    assert policy.state == "failed" and len(policy.scale_downs) == 1
    failure = policy.first_failure
    assert failure is not None and failure.host == "node1"
    assert "1 of 3 hosts left, below --min-hosts 2" in failure.reason


def test_losing_the_rendezvous_host_is_fatal_whatever_remains() -> None:
    policy = elastic(1)
    assert policy.feed(HostSilent("node0", "connection lost", 10.0)) is True
    assert policy.state == "failed" and not policy.scale_downs
    assert policy.first_failure is not None
    assert "the first host, node0, holds the rendezvous" in policy.first_failure.reason


def test_without_min_hosts_a_lost_host_fails_the_job_as_before() -> None:
    policy = JobPolicy(list(DDP3), "ddp", max_restarts=3)
    assert policy.feed(HostSilent("node2", "connection lost", 10.0)) is True
    assert policy.state == "failed" and policy.first_failure is not None
    assert policy.first_failure.reason == "connection lost"


def test_a_scale_down_after_the_survivors_ended_decides_the_job() -> None:
    policy = elastic(2)
    policy.feed(ProcessEnded("node0", "torchrun-0", 0, 20.0))
    policy.feed(ProcessEnded("node1", "torchrun-1", 0, 20.0))
    assert policy.verdict is None  # node2's torchrun still runs, as far as it knows
    policy.feed(HostSilent("node2", "connection lost", 21.0))
    assert policy.over and policy.state == "succeeded"


def test_torchruns_round_is_read_from_its_workers_environment() -> None:
    """A real process group standing for torchrun (bash) and its worker (sleep), with the
    variables torchrun gives each round's workers."""
    env = dict(os.environ, GROUP_WORLD_SIZE="2", TORCHELASTIC_RESTART_COUNT="1")
    agent = subprocess.Popen(["bash", "-c", "sleep 30 & wait"], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 5
        found = None
        while found is None and time.monotonic() < deadline:
            found = sv_torchrun_round(agent.pid)
            time.sleep(0.05)
        assert found == (1, 2)
    finally:
        os.killpg(agent.pid, 9)
        agent.wait()


def test_the_supervisor_source_holds_the_elastic_part_and_compiles() -> None:
    source = supervisor_source()
    assert "class SvElastic" in source
    result = subprocess.run(
        [sys.executable, "-c", "import sys; compile(sys.stdin.read(), 'sv', 'exec')"],
        input=source,
        text=True,
        capture_output=True,
    )
    assert result.returncode == 0, result.stderr


INVENTORY = """\
defaults: {user: me, gpus: 1}
hosts:
  - {name: a, address: 10.0.0.1}
  - {name: b, address: 10.0.0.2}
  - {name: c, address: 10.0.0.3}
"""


@pytest.fixture
def inventory(tmp_path: Path) -> Inventory:
    path = tmp_path / "hosts.yaml"
    path.write_text(INVENTORY)
    return load(path)


def test_min_hosts_plans_torchrun_nnodes_min_max_and_tuned_rendezvous(
    inventory: Inventory,
) -> None:
    spec = make_spec(kind="ddp", program="t.py", master_port=29400, max_restarts=2, min_hosts=2)
    planned = plan(spec, inventory, job_id="j-1")
    assert planned.min_hosts == 2
    for node, launch in enumerate(planned.launches):
        pairs = dict(itertools.pairwise(launch.argv))
        assert pairs["--nnodes"] == "2:3"
        conf = pairs["--rdzv-conf"].split(",")
        assert conf[0] == f"is_host={1 if node == 0 else 0}"
        assert {"last_call_timeout=2", "keep_alive_interval=1", "keep_alive_max_attempt=3"} <= set(
            conf
        )
    # Without --min-hosts: the plain c10d rendezvous, N nodes.
    plain = plan(make_spec(kind="ddp", program="t.py", max_restarts=2), inventory, job_id="j")
    assert dict(itertools.pairwise(plain.launches[0].argv))["--nnodes"] == "3"
    assert plain.min_hosts == 0


def test_the_inventory_default_applies_to_ddp_jobs_with_restarts(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text(INVENTORY.replace("gpus: 1}", "gpus: 1, min_hosts: 5}"))
    hosts = load(path)
    with_restarts = plan(make_spec(kind="ddp", program="t.py", max_restarts=1), hosts, job_id="j")
    assert with_restarts.min_hosts == 3  # a default never exceeds the job's hosts
    assert plan(make_spec(kind="ddp", program="t.py"), hosts, job_id="j").min_hosts == 0
    assert plan(make_spec(kind="ps", program="t.py"), hosts, job_id="j").max_restarts == 0


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"min_hosts": 0, "max_restarts": 1}, "at least 1 host"),
        ({"kind": "mpi", "min_hosts": 2, "max_restarts": 1}, "applies to --kind ddp ("),
        ({"min_hosts": 2, "max_restarts": 0}, "needs --max-restarts N of at least 1"),
    ],
)
def test_bad_min_hosts_errors_name_the_option(fields: dict[str, object], words: str) -> None:
    values: dict[str, object] = {"kind": "ddp", "program": "t.py", **fields}
    with pytest.raises(JobSpecError) as caught, naming_options():
        make_spec(**values)
    assert caught.value.field == "--min-hosts" and words in str(caught.value)


def test_min_hosts_beyond_the_jobs_hosts_or_without_restarts_is_a_plan_error(
    inventory: Inventory,
) -> None:
    spec = make_spec(kind="ddp", program="t.py", max_restarts=1, min_hosts=4)
    with pytest.raises(PlanError, match=r"--min-hosts 4 must be 1\.\.3"):
        plan(spec, inventory, job_id="j")
    spec = make_spec(kind="ddp", program="t.py", min_hosts=2)
    with pytest.raises(PlanError, match="--min-hosts 2 needs --max-restarts"):
        plan(spec, inventory, job_id="j")


def test_membership_reads_the_scale_downs() -> None:
    view = {"scale_downs": [{"host": "c", "cause": "lost"}]}
    assert hosts_now(("a", "b", "c"), view) == ["a", "b"]
    assert membership(("a", "b", "c"), view) == "2 of 3 hosts"
    assert membership(("a", "b", "c"), {}) == "" and membership(("a",), None) == ""


def test_effective_training_time_counts_each_step_once() -> None:
    """Steps 1..4 at 2 steps/s, then a restart redoes steps 3..4 and runs 5..6: each of
    the 6 steps counts once (0.5 s), over 10 s of wall time."""
    points = [CurvePoint(None, step, None, 2.0) for step in (1, 2, 3, 4, 3, 4, 5, 6)]
    line = effective_training({0: tuple(points), 1: ()}, 10.0)
    assert line == "effective training time: 30% (3.0 s of steps advanced in 10.0 s)"
    assert effective_training({0: (CurvePoint(None, 1, 0.5, None),)}, 10.0) == ""


# The drain's detection (health rules, CUDA_VISIBLE_DEVICES): tests/unit/test_drain_health.py


def test_a_drained_host_is_a_scale_down_with_its_finding() -> None:
    policy = elastic(2)
    policy.feed(HostSilent("node1", "drained: GPU 0: row remapping failed", 10.0))
    assert policy.verdict is None and policy.hosts_now == ["node0", "node2"]
    assert policy.scale_downs[0]["cause"] == "drained: GPU 0: row remapping failed"


# --spare-hosts: a spare's torchrun agent waits in torch's rendezvous to replace a host.

SPARE = PolicyProcess("node3", "torchrun-3", "torchrun", ())


def with_spare() -> JobPolicy:
    policy = elastic(2)
    policy.processes.append(SPARE)
    policy.spare_hosts = ["node3"]
    return policy


def test_a_spare_that_joins_replaces_the_lost_host_in_the_membership() -> None:
    policy = with_spare()
    assert policy.hosts == ["node0", "node1", "node2"] and policy.hosts_now == policy.hosts
    assert policy.feed(HostSilent("node2", "connection lost", 10.0)) is False
    assert policy.hosts_now == ["node0", "node1"]
    assert policy.spare_joined("node3", 12.0) is True
    assert policy.spare_joined("node3", 13.0) is False  # told once
    assert policy.hosts_now == ["node0", "node1", "node3"]
    assert policy.joins == [{"host": "node3", "at": 12.0, "hosts_now": policy.hosts_now}]
    for name in ("node0", "node1", "node3"):
        policy.feed(ProcessEnded(name, f"torchrun-{name[-1]}", 0, 30.0))
    assert policy.over and policy.state == "succeeded"


def test_a_waiting_spare_is_no_failure_and_the_job_ends_without_waiting_for_it() -> None:
    policy = with_spare()
    assert policy.feed(ProcessEnded("node0", "torchrun-0", 0, 30.0)) is False
    assert policy.feed(ProcessEnded("node1", "torchrun-1", 0, 30.0)) is False
    # The last job process ended: the verdict, and the stop of the waiting spare.
    assert policy.feed(ProcessEnded("node2", "torchrun-2", 0, 30.0)) is True
    assert policy.verdict == "succeeded" and not policy.over
    # Its agent ends as the rendezvous closes or the stop reaches it: still a success.
    assert policy.feed(ProcessEnded("node3", "torchrun-3", 1, 31.0)) is False
    assert policy.over and policy.state == "succeeded" and policy.first_failure is None


def test_a_waiting_spare_that_fails_or_goes_silent_does_not_touch_the_job() -> None:
    policy = with_spare()
    assert policy.feed(ProcessEnded("node3", "torchrun-3", 1, 5.0)) is False
    assert policy.verdict is None and policy.first_failure is None
    other = with_spare()
    assert other.feed(HostSilent("node3", "connection lost", 5.0)) is False
    assert other.verdict is None and not other.scale_downs
    assert other.hosts_now == ["node0", "node1", "node2"]


def test_a_joined_spare_is_a_host_of_the_job_like_the_others() -> None:
    policy = with_spare()
    policy.feed(HostSilent("node2", "connection lost", 10.0))
    policy.spare_joined("node3", 12.0)
    assert policy.feed(ProcessEnded("node3", "torchrun-3", 1, 20.0)) is True
    assert policy.state == "failed" and policy.first_failure is not None
    assert policy.first_failure.host == "node3"


def test_spare_hosts_plan_a_gated_agent_of_the_same_rendezvous(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text(INVENTORY + "  - {name: d, address: 10.0.0.4}\n")
    spec = make_spec(
        kind="ddp", program="t.py", master_port=29400, max_restarts=2, min_hosts=2,
        spare_hosts=("d",),
    )  # fmt: skip
    planned = plan(spec, load(path), job_id="j-1")
    assert [la.host for la in planned.launches] == ["a", "b", "c", "d"]
    assert planned.world_size == 3 and [la.ranks for la in planned.launches][3] == ()
    spare = planned.launches[3].argv
    assert spare[:2] == ("bash", "-c") and spare[4].endswith("/j-1/spare-go.d")
    pairs = dict(itertools.pairwise(spare))
    assert pairs["--nnodes"] == "2:3" and pairs["--local-addr"] == "10.0.0.4"
    assert pairs["--rdzv-endpoint"] == "10.0.0.1:29400"
    assert pairs["--rdzv-conf"].startswith("is_host=0,")
    assert "d" in planned.job_dirs
    assert any("spare hosts: d" in note for note in planned.notes)
    # The gate runs the agent once its file exists (a ~/ path is the home's).
    gate = tmp_path / "gate"
    argv = ["bash", "-c", spare[2], "x", str(gate), "echo", "started"]
    waiting = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    time.sleep(0.7)
    assert waiting.poll() is None
    gate.write_text("go\n")
    assert waiting.communicate(timeout=5)[0] == "started\n"
    home = subprocess.run(
        ["bash", "-c", spare[2], "x", "~/gate", "echo", "home"],
        env={**os.environ, "HOME": str(tmp_path)}, capture_output=True, text=True, timeout=5,
    )  # fmt: skip
    assert home.stdout == "home\n"


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"kind": "mpi", "min_hosts": None}, "applies to --kind ddp"),
        ({"max_restarts": 0, "min_hosts": None}, "applies to --kind ddp with --min-hosts"),
        ({"hosts": ("a", "b", "d")}, "d is already one of the job's --hosts"),
        ({"spare_hosts": ("d", "d")}, "listed twice"),
    ],
)
def test_bad_spare_hosts_errors_name_the_option(fields: dict[str, object], words: str) -> None:
    values: dict[str, object] = {
        "kind": "ddp", "program": "t.py", "min_hosts": 2, "max_restarts": 1,
        "spare_hosts": ("d",), **fields,
    }  # fmt: skip
    with pytest.raises(JobSpecError) as caught, naming_options():
        make_spec(**values)
    assert caught.value.field == "--spare-hosts" and words in str(caught.value)


def test_spare_hosts_must_be_known_and_need_min_hosts(inventory: Inventory) -> None:
    spec = make_spec(kind="ddp", program="t.py", max_restarts=1, min_hosts=2, spare_hosts=("zz",))
    with pytest.raises(JobSpecError, match="no host named zz"):
        plan(spec, inventory, job_id="j")
    spec = make_spec(kind="ddp", program="t.py", max_restarts=1, spare_hosts=("c",))
    with pytest.raises(PlanError, match="--spare-hosts needs --min-hosts"):
        plan(spec, inventory, job_id="j")
    # Without --hosts the job's hosts are the others.
    spec = make_spec(kind="ddp", program="t.py", max_restarts=1, min_hosts=1, spare_hosts=("c",))
    planned = plan(spec, inventory, job_id="j")
    assert [la.host for la in planned.launches] == ["a", "b", "c"]
    assert dict(itertools.pairwise(planned.launches[0].argv))["--nnodes"] == "1:2"


def test_membership_counts_a_spare_only_once_it_joined() -> None:
    hosts = ("node0", "node1", "node2", "node3")
    waiting = {"spare_hosts": ["node3"], "scale_downs": [], "joins": []}
    assert hosts_now(hosts, waiting) == ["node0", "node1", "node2"]
    assert membership(hosts, waiting) == ""
    down = {**waiting, "scale_downs": [{"host": "node2"}]}
    assert membership(hosts, down) == "2 of 3 hosts"
    replaced = {**down, "joins": [{"host": "node3", "at": 1.0}]}
    assert hosts_now(hosts, replaced) == ["node0", "node1", "node3"]
    assert membership(hosts, replaced) == "3 of 3 hosts"
