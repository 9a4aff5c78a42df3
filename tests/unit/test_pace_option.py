"""``--slow-threshold`` (issue 32): validated on the spec, carried by the plan (and the
history's copy of it) to every host's supervisor config, where the pace part reads it;
and the notify event ``slow`` exists but is not on by default."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from console.commands.parts.job_options import add_job_options
from console.errors import JobSpecError, PlanError
from console.hostprogs.pace.hook import pace_exclusions, pace_settings
from console.hostprogs.supervisor.notify import NOTIFY_DEFAULT_ON, NOTIFY_EVENTS
from console.inventory import load
from console.jobs.plan.planner import plan
from console.jobs.plan_json import plan_from_json, plan_to_json
from console.jobs.spec import make_spec
from console.jobs.ssh.supervision import supervisor_spec


def test_the_threshold_reaches_every_supervisor_and_the_pace_part(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        "hosts:\n  - {name: n0, address: 10.0.0.1, gpus: 1}\n"
        "  - {name: n1, address: 10.0.0.2, gpus: 1}\n"
    )
    inventory = load(hosts)
    planned = plan(
        make_spec(kind="ddp", program="t.py", slow_threshold=2.0), inventory, job_id="j-1"
    )
    assert plan_from_json(plan_to_json(planned)).slow_threshold == 2.0
    for host in ("n0", "n1"):
        cfg = supervisor_spec(
            planned, host, leader=inventory.hosts[0], leader_port=1, secret="k", grace_s=5
        )["config"]
        assert cfg["pace"] == {"threshold": 2.0}
        settings = pace_settings(cfg)
        assert settings is not None and settings["threshold"] == 2.0
        assert settings["window_s"] == 15.0 and settings["windows"] == 2
    default = plan(make_spec(kind="ddp", program="t.py"), inventory, job_id="j-2")
    cfg = supervisor_spec(
        default, "n0", leader=inventory.hosts[0], leader_port=1, secret="k", grace_s=5
    )["config"]
    assert pace_settings(cfg) == {"window_s": 15.0, "threshold": 1.3, "windows": 2, "every_s": 1.0}
    # A ps job's workers do not wait for each other: scored on their step rates
    # (tests/unit/test_pace_steps.py); a Ray job is not scored.
    assert pace_settings({**cfg, "kind": "ps"}) is not None
    assert pace_settings({**cfg, "kind": "ray"}) is None
    assert pace_settings({**cfg, "pace": False}) is None


@pytest.mark.parametrize("bad", [1.0, 0.5, 11.0])
def test_a_threshold_that_could_not_work_is_refused_naming_the_option(bad: float) -> None:
    with pytest.raises(JobSpecError) as info:
        make_spec(kind="ddp", program="t.py", slow_threshold=bad)
    assert info.value.field == "slow_threshold" and "1.05..10" in str(info.value)


def test_the_cli_option_and_the_notify_event() -> None:
    parser = argparse.ArgumentParser()
    add_job_options(parser)
    assert parser.parse_args(["--slow-threshold", "1.5"]).slow_threshold == 1.5
    assert "slow" in NOTIFY_EVENTS and "slow" not in NOTIFY_DEFAULT_ON


def test_exclude_slow_needs_an_elastic_ddp_job_and_reaches_the_supervisors(
    tmp_path: Path,
) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        "hosts:\n  - {name: n0, address: 10.0.0.1, gpus: 1}\n"
        "  - {name: n1, address: 10.0.0.2, gpus: 1}\n"
    )
    inventory = load(hosts)
    with pytest.raises(PlanError, match=r"--exclude-slow .* --min-hosts"):
        plan(make_spec(kind="ddp", program="t.py", exclude_slow=5), inventory, job_id="j-3")
    with pytest.raises(JobSpecError) as info:
        make_spec(kind="ddp", program="t.py", exclude_slow=0)
    assert info.value.field == "exclude_slow"
    elastic = make_spec(kind="ddp", program="t.py", exclude_slow=5, min_hosts=1, max_restarts=1)
    planned = plan(elastic, inventory, job_id="j-4")
    assert plan_from_json(plan_to_json(planned)).exclude_slow == 5
    cfg = supervisor_spec(
        planned, "n1", leader=inventory.hosts[0], leader_port=1, secret="k", grace_s=5
    )["config"]
    assert cfg["exclude_slow_s"] == 300


def test_the_leader_drains_a_follower_slow_long_enough_once_never_itself() -> None:
    slow = [
        {"rank": 0, "host": "n0", "relative": 2.0, "cause": "c0", "since": 0.0},
        {"rank": 1, "host": "n1", "relative": 1.8, "cause": "CPU: quota", "since": 0.0},
        {"rank": 2, "host": "n2", "relative": 1.5, "cause": "c2", "since": 200.0},
    ]
    assert pace_exclusions(slow, 299.0, 300.0, "n0", set()) == {}
    found = pace_exclusions(slow, 300.0, 300.0, "n0", set())
    assert found == {"n1": "rank 1 slow for 5 min (1.8x the median: CPU: quota)"}
    # --exclude-slow takes fractions of a minute: a short span reads in seconds.
    assert pace_exclusions(slow[1:2], 36.0, 6.0, "n0", set())["n1"].startswith(
        "rank 1 slow for 36 s ("
    )
    assert pace_exclusions(slow, 600.0, 300.0, "n0", {"n1"}).keys() == {"n2"}
