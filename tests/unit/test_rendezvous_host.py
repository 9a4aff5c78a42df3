"""Issue 31 items 1, 2 and 6 without a network: ``--rendezvous-host`` (hosts.yaml's
``rendezvous_host`` as a default), its checks naming the option or key, and the ddp plan
it makes: the store program first (the leader), every agent at its store with
``is_host=0``, the training hosts alone in ``hosts_involved``, the port pre-flighted on
the rendezvous host, and the plan's one line about it."""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from console.commands.plan import format_plan
from console.errors import InventoryError, JobSpecError, PlanError
from console.inventory import Inventory, load
from console.jobs.models import JobPlan
from console.jobs.plan.ddp import ELASTIC_RDZV_CONF
from console.jobs.plan.placement import place
from console.jobs.plan.planner import plan
from console.jobs.plan.ports import listen_ports
from console.jobs.spec import make_spec

TRAINING = ("node0", "node1", "node2")
HOSTS_YAML = """
defaults:
  gpus: 2
hosts:
  - {name: node0, address: 10.0.0.10}
  - {name: node1, address: 10.0.0.11}
  - {name: node2, address: 10.0.0.12}
  - {name: node3, address: 10.0.0.13, python: /opt/torch/bin/python}
  - {name: node4, address: 10.0.0.14}
"""


@pytest.fixture()
def inventory(tmp_path: Path) -> Inventory:
    return load(write(tmp_path, HOSTS_YAML))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def ddp(inventory: Inventory, **extra: object) -> JobPlan:
    fields: dict[str, object] = {
        "kind": "ddp", "program": "train.py", "hosts": ("node0", "node1", "node2"),
        "rendezvous_host": "node3", "max_restarts": 3, "min_hosts": 2,
    }  # fmt: skip
    return plan(make_spec(**{**fields, **extra}), inventory, job_id="job-1")


def arg(argv: tuple[str, ...], option: str) -> str:
    return argv[argv.index(option) + 1]


def test_the_plan_starts_the_store_first_and_every_agent_connects_to_it(
    inventory: Inventory,
) -> None:
    planned = ddp(inventory)
    store, *agents = planned.launches
    assert (store.host, store.role, store.ranks) == ("node3", "rendezvous", ())
    assert store.argv[0] == "/opt/torch/bin/python"  # the host's Python (it imports torch)
    assert store.argv[1].endswith("/job-1/rendezvous_store.py")
    assert arg(store.argv, "--port") == str(planned.master_port)
    assert arg(store.argv, "--address") == "10.0.0.13"
    assert arg(store.argv, "--run-id") == "job-1"
    assert [u.path for u in planned.uploads if u.host == "node3"] == [store.argv[1]]
    # Elastic: the leader's suspects file and each agent's --local-addr (rendezvous_store).
    assert arg(store.argv, "--hosts-file").endswith("/job-1/rendezvous-hosts.json")
    assert (arg(store.argv, "--min-nodes"), arg(store.argv, "--max-nodes")) == ("2", "3")
    agent_pairs = [store.argv[i + 1] for i, a in enumerate(store.argv) if a == "--agent"]
    assert agent_pairs == ["node0=10.0.0.10", "node1=10.0.0.11", "node2=10.0.0.12"]
    assert [a.host for a in agents] == ["node0", "node1", "node2"]
    for agent in agents:
        argv = agent.argv
        assert arg(argv, "--rdzv-backend") == "c10d"
        assert arg(argv, "--rdzv-endpoint") == f"10.0.0.13:{planned.master_port}"
        conf = arg(argv, "--rdzv-conf").split(",")
        # No agent may host the store: no fallback when the rendezvous host is slow.
        assert conf[0] == "is_host=0"
        assert set(ELASTIC_RDZV_CONF) <= set(conf)
        assert arg(argv, "--nnodes") == "2:3"
        assert agent.env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert planned.hosts_involved == ("node0", "node1", "node2")
    assert planned.rendezvous_host == "node3"
    assert planned.master_addr == "10.0.0.13"
    assert planned.world_size == 6  # node3 trains nothing


def test_without_restarts_the_agents_still_meet_at_the_rendezvous_host(
    inventory: Inventory,
) -> None:
    planned = ddp(inventory, max_restarts=0, min_hosts=None)
    assert "--hosts-file" not in planned.launches[0].argv  # no scale-down to cut short
    for agent in planned.launches[1:]:
        assert arg(agent.argv, "--rdzv-endpoint").startswith("10.0.0.13:")
        assert arg(agent.argv, "--rdzv-conf") == "is_host=0"
        assert arg(agent.argv, "--max-restarts") == "0"
        assert "--node-rank" not in agent.argv


def test_spares_join_through_the_same_store(inventory: Inventory) -> None:
    planned = ddp(inventory, spare_hosts=("node4",))
    spare = planned.launches[-1]
    assert spare.host == "node4" and spare.ranks == ()
    assert arg(spare.argv, "--rdzv-endpoint").startswith("10.0.0.13:")
    assert arg(spare.argv, "--rdzv-conf").startswith("is_host=0,")


def test_the_plan_says_who_holds_the_rendezvous_instead_of_the_first_host_line(
    inventory: Inventory,
) -> None:
    planned = ddp(inventory)
    lines = [n for n in planned.notes if "ends the job" in n]
    assert lines == [
        f"rendezvous host: node3 holds the job's rendezvous (torch's c10d store on port "
        f"{planned.master_port}) and its leader supervisor, and trains nothing: any "
        "training host may be lost; losing node3 ends the job"
    ]
    assert not any(n.startswith("Losing node0") for n in planned.notes)
    text = format_plan(planned)
    assert "[node3] rendezvous 0" in text and "rendezvous host: node3 holds" in text


def test_the_master_port_is_preflighted_on_the_rendezvous_host(inventory: Inventory) -> None:
    spec = make_spec(kind="ddp", program="t.py", hosts=("node0", "node1"), rendezvous_host="node3")
    ports = listen_ports(place(spec, inventory, "job-1"))
    assert list(ports) == ["node3"]
    assert ports["node3"][0].what == "master port"


def test_the_inventorys_rendezvous_host_is_the_default(tmp_path: Path) -> None:
    loaded = load(write(tmp_path, HOSTS_YAML + "  - {name: login, address: 10.0.0.99}\n"))
    with_default = Inventory(
        path=loaded.path,
        hosts=tuple(h.model_copy(update={"rendezvous_host": "login"}) for h in loaded.hosts),
    )
    # No --hosts: every host but the rendezvous host trains.
    planned = plan(make_spec(kind="ddp", program="t.py"), with_default, job_id="job-1")
    assert planned.rendezvous_host == "login"
    assert planned.hosts_involved == ("node0", "node1", "node2", "node3", "node4")
    # A default never turns a host the job names into its rendezvous host, nor applies
    # to a kind without one.
    named = plan(
        make_spec(kind="ddp", program="t.py", hosts=("login", "node0")), with_default, job_id="j"
    )
    assert named.rendezvous_host is None
    ps = plan(make_spec(kind="ps", program="t.py"), with_default, job_id="job-2")
    assert ps.rendezvous_host is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"kind": "ps"},
            "rendezvous_host: applies to --kind ddp (torchrun's c10d store) and to --kind "
            "horovod with --horovod-elastic, not ps",
        ),
        (
            {"kind": "mpi"},
            "rendezvous_host: applies to --kind ddp (torchrun's c10d store) and to --kind "
            "horovod with --horovod-elastic, not mpi",
        ),
        (
            {"kind": "horovod"},
            "rendezvous_host: applies to a horovod job under Horovod elastic only "
            "(--horovod-elastic): plain horovodrun has no rendezvous to move",
        ),
        (
            {"kind": "ddp", "hosts": ("node0", "node3")},
            "rendezvous_host: node3 is one of the job's --hosts: the rendezvous host trains "
            "nothing (leave it out of --hosts)",
        ),
        (
            {"kind": "ddp", "spare_hosts": ("node3",), "min_hosts": 1, "max_restarts": 1},
            "rendezvous_host: node3 is one of the job's --spare-hosts: the rendezvous host "
            "trains nothing",
        ),
    ],
)
def test_the_spec_refuses_naming_the_option(fields: dict[str, object], message: str) -> None:
    with pytest.raises(JobSpecError) as info:
        make_spec(program="t.py", rendezvous_host="node3", **fields)
    assert str(info.value) == message


def test_the_plan_refuses_a_host_not_in_the_inventory_or_among_the_job(
    inventory: Inventory,
) -> None:
    with pytest.raises(JobSpecError) as info:
        ddp(inventory, rendezvous_host="node9")
    assert info.value.field == "rendezvous_host"
    assert "no host named node9 in" in str(info.value) and "node0, node1" in str(info.value)
    with pytest.raises(JobSpecError) as info:
        plan(
            make_spec(kind="ddp", program="t.py", tags=(), rendezvous_host="node3"),
            Inventory(path=inventory.path, hosts=inventory.hosts[3:4]),
            job_id="j",
        )
    assert str(info.value) == "rendezvous_host: node3 is the only selected host"


def test_the_cli_option_reaches_the_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from console.cli import main

    path = str(write(tmp_path, HOSTS_YAML))
    common = ["plan", path, "--kind", "ddp", "--hosts", "node0,node1", "--json"]
    assert main([*common, "--rendezvous-host", "node3", "--", "t.py"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rendezvous_host"] == "node3"
    assert [x["role"] for x in data["launches"]] == ["rendezvous", "torchrun", "torchrun"]
    assert main([*common, "--rendezvous-host", "node1", "--", "t.py"]) == 2
    err = capsys.readouterr().err
    assert "--rendezvous-host: node1 is one of the job's --hosts" in err, err


def test_hosts_yaml_checks_the_key_naming_it_and_its_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        defaults:
          rendezvous_host: login
        hosts:
          - {name: node0, address: 10.0.0.10}
          - name: node1
            address: 10.0.0.11
            rendezvous_host: "bad name"
        """,
    )
    with pytest.raises(InventoryError) as info:
        load(path)
    text = str(info.value)
    assert "hosts.yaml:2: defaults.rendezvous_host: 'login': not a host of this inventory" in text
    assert "hosts[1].rendezvous_host: 'bad name' is not valid here" in text


def test_a_kind_not_built_for_it_is_refused_at_planning(inventory: Inventory) -> None:
    """Horovod elastic's rendezvous host is H2's part of issue 31: until its planner
    places the driver there, the plan says so instead of ignoring the option."""
    spec = make_spec(
        kind="horovod", program="example:horovod", hosts=("node0", "node1"),
        rendezvous_host="node3", horovod_elastic=True, max_restarts=1,
    )  # fmt: skip
    try:
        planned = plan(spec, inventory, job_id="job-1")
    except PlanError as exc:
        assert str(exc).startswith("--rendezvous-host node3: not built for this kind yet")
    else:
        assert planned.rendezvous_host == "node3"


def test_jobs_json_the_table_the_jobs_screen_and_the_gpu_screen_show_it_apart(
    inventory: Inventory, tmp_path: Path
) -> None:
    from console.commands.jobs import hosts_text, state_text
    from console.jobs.history import JobHistory
    from console.jobs.models import JobState
    from console.ui.job_rows import rendezvous_roles, row_of_summary

    history = JobHistory(tmp_path / "history.sqlite")
    planned = ddp(inventory)
    history.add(planned, inventory=str(inventory.path), state=JobState.RUNNING)
    record = history.get("job-1")
    assert record.hosts[0] == "node3"  # the leader's host, first everywhere
    summary = record.summary()
    assert summary["rendezvous_host"] == "node3"
    assert summary["hosts"] == ["node0", "node1", "node2"] and summary["hosts_total"] == 3
    assert summary["hosts_now"] == ["node0", "node1", "node2"]
    assert hosts_text(record) == "node0,node1,node2 (rendezvous: node3)"
    # A scale-down counts training hosts only: 2 of 3, not 3 of 4.
    view = {"scale_downs": [{"host": "node0"}], "rendezvous_host": "node3"}
    assert state_text(replace(record, host_view=view)) == "running · 2 of 3 hosts"
    [listed] = history.summaries()
    row = row_of_summary(replace(listed, host_view={"scale_downs": [{"host": "node0"}]}))
    assert (row.hosts, row.rendezvous_host) == (("node0", "node1", "node2"), "node3")
    assert row.membership == "2 of 3 hosts"
    assert rendezvous_roles([row]) == {"node3": "rendezvous of job-1"}
    assert rendezvous_roles([replace(row, state=JobState.SUCCEEDED)]) == {}


def test_preflight_asks_the_rendezvous_host_for_its_python_and_port_not_the_program(
    inventory: Inventory,
) -> None:
    from console.jobs.preflight.job import plan_requests

    planned = ddp(inventory, program="/srv/train.py")
    spec = make_spec(kind="ddp", program="t.py", hosts=TRAINING, rendezvous_host="node3")
    requests = plan_requests(
        planned, inventory, {h: 1 for h in TRAINING}, None, program="/srv/train.py",
        ports=listen_ports(place(spec, inventory, "job-1")),
    )  # fmt: skip
    by_host = {r.host.name: r for r in requests}
    store = by_host["node3"]
    assert store.programs == ("/opt/torch/bin/python",) and store.gpus == 0
    assert store.files == () and [p.what for p in store.ports] == ["master port"]
    assert by_host["node0"].files == (("~/distconsole", "/srv/train.py"),)


def test_the_launch_forms_field_reaches_the_spec_and_shows_its_problem() -> None:
    from console.ui.screens.launch_fields import LABELS, form_to_spec

    assert LABELS["rendezvous_host"] == "Rendezvous host"
    base = {"kind": "ddp", "hosts": ["node0"], "program": "t.py"}
    spec, errors = form_to_spec({**base, "rendezvous_host": " node3 "})
    assert errors == {} and spec is not None and spec.rendezvous_host == "node3"
    spec, errors = form_to_spec({**base, "rendezvous_host": "node0"})
    assert spec is None and errors["rendezvous_host"].startswith("node0 is one of the job's")
    spec, errors = form_to_spec({**base, "kind": "ps", "rendezvous_host": "node3"})
    assert spec is None and "not ps" in errors["rendezvous_host"]
