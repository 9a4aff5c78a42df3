"""--spare-hosts on the console's side: hosts.yaml's ``spare_hosts`` (checked, naming the
key and its line; the leader host's is the default), ``jobs --json``'s hosts, spares and
the spares that joined, and what the report says of a replacement (summary.txt, the
timeline) and of a spare never needed."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from console.commands.jobs import render
from console.inventory import Host, Inventory
from console.jobs.history import JobRecord
from console.jobs.membership import plan_spares, replacements
from console.jobs.models import JobState
from console.jobs.plan.planner import plan
from console.jobs.report.bundle import HostBundle, compose_summary, summary_lines
from console.jobs.report.timeline import timeline, timeline_text
from console.jobs.spec import make_spec
from tests.unit.test_inventory import error_of, write

HOSTS = ("node0", "node1", "node2", "node3")


def inventory(**extra: Any) -> Inventory:
    return Inventory(
        path="/srv/hosts.yaml",
        hosts=tuple(
            Host(name=n, address=f"10.0.0.{10 + i}", gpus=1, **extra) for i, n in enumerate(HOSTS)
        ),
    )


# -- hosts.yaml ------------------------------------------------------------------------


def test_spare_hosts_in_defaults_or_per_host_a_list_or_a_string(tmp_path: Path) -> None:
    from console.inventory import load

    path = write(
        tmp_path,
        """
        defaults:
          spare_hosts: [node3]
        hosts:
          - {name: node0, address: 10.0.0.10}
          - {name: node1, address: 10.0.0.11, spare_hosts: "node2, node3"}
          - {name: node2, address: 10.0.0.12}
          - {name: node3, address: 10.0.0.13}
        """,
    )
    loaded = load(path)
    assert [h.spare_hosts for h in loaded.hosts] == [
        ("node3",), ("node2", "node3"), ("node3",), ("node3",),
    ]  # fmt: skip


def test_a_bad_spare_hosts_names_its_key_and_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        defaults:
          min_hosts: 2
          spare_hosts: [node3, node9]
        hosts:
          - {name: node0, address: 10.0.0.10}
          - name: node1
            address: 10.0.0.11
            spare_hosts: "node3,bad name"
          - name: node3
            address: 10.0.0.13
            spare_hosts: node0, node0
          - name: node4
            address: 10.0.0.14
            spare_hosts: 3
        """,
    )
    text = str(error_of(path))
    assert "hosts.yaml:3: defaults.spare_hosts: 'node9': not a host of this inventory" in text
    assert "(hosts: node0, node1, node3, node4)" in text  # node1 counts, its own key wrong
    assert "hosts.yaml:8: hosts[1].spare_hosts: 'bad name' is not valid here" in text
    assert "hosts.yaml:11: hosts[2].spare_hosts: a host is listed twice" in text
    assert "hosts.yaml:14: hosts[3].spare_hosts: must be a list of host names" in text


def test_the_leader_hosts_spare_hosts_is_the_default_of_an_elastic_ddp_job() -> None:
    elastic = inventory(spare_hosts=("node3",), min_hosts=2, max_restarts=2)
    job = plan(make_spec(kind="ddp", program="train.py"), elastic, job_id="j-1")
    assert plan_spares(job) == ("node3",)
    assert [la.host for la in job.launches if la.ranks] == ["node0", "node1", "node2"]
    # A default only: not without restarts or a floor, not for another kind, and never
    # one of the hosts the job names.
    plain = inventory(spare_hosts=("node3",))
    job = plan(make_spec(kind="ddp", program="train.py"), plain, job_id="j-2")
    assert plan_spares(job) == () and len(job.launches) == 4
    named = make_spec(kind="ddp", program="train.py", hosts=("node0", "node3"))
    assert plan_spares(plan(named, elastic, job_id="j-3")) == ()
    ps = make_spec(kind="ps", program="example:ps")
    assert {la.host for la in plan(ps, elastic, job_id="j-4").launches} == set(HOSTS)


# -- membership -----------------------------------------------------------------------


def test_each_join_is_paired_with_the_scale_down_it_made_up_for() -> None:
    downs = [
        {"host": "node2", "at": 110.8, "cause": "host lost"},  # decided after the join
        {"host": "node1", "at": 300.0, "cause": "drained"},
    ]
    joins = [{"host": "node3", "at": 110.0}, {"host": "node4", "at": 305.0}]
    pairs = replacements(downs, joins)
    assert [(j["host"], d and d["host"]) for j, d in pairs] == [
        ("node3", "node2"), ("node4", "node1"),
    ]  # fmt: skip
    [(_join, down)] = replacements([], [{"host": "node3", "at": 1.0}])
    assert down is None
    far = replacements([{"host": "node2", "at": 500.0}], [{"host": "node3", "at": 1.0}])
    assert far[0][1] is None  # a scale-down long after the join is not its cause


# -- jobs --json and the report ---------------------------------------------------------


def spare_record(view: dict[str, Any] | None, state: JobState = JobState.SUCCEEDED) -> JobRecord:
    spec = make_spec(
        kind="ddp", program="train.py", min_hosts=2, max_restarts=3, spare_hosts=("node3",)
    )
    planned = plan(spec, inventory(), job_id="job-1")
    return JobRecord(
        id="job-1", name="train", kind=planned.kind, state=state, started=1.0e9,
        ended=1.0e9 + 30, hosts=HOSTS, inventory="hosts.yaml", fail_fast=True,
        plan=planned, failure=None, host_view=view,
    )  # fmt: skip


LOST_AT = 1.0e9 + 10
REPLACED: dict[str, Any] = {
    "supervisor": "succeeded",
    "spare_hosts": ["node3"],
    "scale_downs": [
        {"host": "node2", "cause": "host lost: its supervisor's connection closed",
         "at": LOST_AT + 0.8, "hosts_now": ["node0", "node1", "node3"], "hosts_total": 3},
    ],
    "joins": [{"host": "node3", "at": LOST_AT, "hosts_now": list(HOSTS)}],
}  # fmt: skip


def test_jobs_json_lists_the_planned_hosts_the_spares_and_those_that_joined() -> None:
    never = spare_record(None).summary()  # before any console read the hosts: the plan
    assert never["hosts"] == ["node0", "node1", "node2"]
    assert never["spare_hosts"] == ["node3"] and never["spares_joined"] == []
    assert never["hosts_now"] == ["node0", "node1", "node2"] and never["hosts_total"] == 3
    joined = spare_record(REPLACED).summary()
    assert joined["hosts"] == ["node0", "node1", "node2"]
    assert joined["spare_hosts"] == ["node3"] and joined["spares_joined"] == ["node3"]
    assert joined["hosts_now"] == ["node0", "node1", "node3"] and joined["hosts_total"] == 3
    json.dumps(joined)  # what `jobs --json` prints


def test_the_jobs_table_names_the_spares_apart_from_the_jobs_hosts() -> None:
    table = render([spare_record(REPLACED)])
    assert "node0,node1,node2 (spares: node3)" in table, table
    assert "3 of 3 hosts" in table, table


def test_summary_says_which_host_each_spare_replaced_and_when() -> None:
    lines = summary_lines(spare_record(REPLACED))
    assert lines[0].endswith("3 ranks on node0, node1, node2 (spare hosts: node3)")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(LOST_AT))
    assert f"replacements: node3 joined for node2 at {when}" in lines
    assert any(line.startswith("scaled down at ") for line in lines)


def test_a_spare_never_needed_says_so_in_the_summary_and_its_process_line() -> None:
    view = {"supervisor": "succeeded", "spare_hosts": ["node3"], "scale_downs": [], "joins": []}
    record = spare_record(view)
    assert "node3: spare, not needed" in summary_lines(record)
    waiting = spare_record({**view, "supervisor": "running"}, JobState.RUNNING)
    assert "node3: spare, waiting to replace a lost host" in summary_lines(waiting)
    bundles = [
        HostBundle(h, {f"torchrun-{i}.sh": b"", f"torchrun-{i}.exit": b"0"})
        for i, h in enumerate(HOSTS)
    ]
    bundles[3].files["torchrun-3.exit"] = b"1"  # torch's idle agent, once the store went
    summary = compose_summary(record, bundles)
    assert "  node3 torchrun-3: spare, not needed (exit 1)" in summary
    assert "  node2 torchrun-2: exit 0" in summary


def test_the_timeline_names_the_host_a_spare_replaced() -> None:
    leader = [
        {"t": LOST_AT, "event": "spare-joined", "host": "node0", "peer": "node3",
         "at": LOST_AT, "hosts_now": list(HOSTS)},
        {"t": LOST_AT + 0.8, "event": "scaled-down", "host": "node0", "peer": "node2",
         "cause": "host lost", "at": LOST_AT + 0.8},
    ]  # fmt: skip
    spare = [{"t": LOST_AT - 0.1, "event": "spare-joined", "host": "node3", "agents": 3}]
    bundles = [
        HostBundle("node0", {"events.jsonl": "\n".join(map(json.dumps, leader)).encode()}),
        HostBundle("node3", {"events.node3.jsonl": json.dumps(spare[0]).encode()}),
    ]
    text = timeline_text(timeline(bundles))
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(LOST_AT + 0.8))
    [line] = [x for x in text.splitlines() if "peer=" in x and "spare-joined" in x]
    assert ' spare-joined peer="node3"' in line and 'replaced="node2"' in line
    assert f'cause="node2 left at {when} (host lost)"' in line
    assert "replaced" not in text.splitlines()[0]  # the spare's own event: no peer


@pytest.mark.parametrize("state", ["running", "succeeded"])
def test_the_jobs_screen_line_under_a_job_names_the_replacement(state: str) -> None:
    from console.ui.jobs_service import screen_notes

    notes = screen_notes({**REPLACED, "supervisor": state})
    assert any(n.startswith("replacements: node3 joined for node2 at ") for n in notes)
