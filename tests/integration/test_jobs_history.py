"""Job history (SQLite) and the per-process wrapper, without any host."""

from __future__ import annotations

import subprocess
from pathlib import Path

from console.inventory import Host
from console.jobs.history import JobHistory
from console.jobs.models import JobKind, JobPlan, JobState, LogFile, RankLaunch, Upload
from console.jobs.plan_json import plan_from_json, plan_to_json
from console.jobs.ssh.remote_ops import wrapper_script


def sample_plan(job_id: str = "ddp-x-20260101-000000-abcdef") -> JobPlan:
    jd = f"~/distconsole/.distconsole/jobs/{job_id}"
    launch = RankLaunch(
        host="node0",
        role="torchrun",
        index=0,
        argv=("torchrun", "--nnodes", "1", "train.py", "'; touch /tmp/x #"),
        env={"A": "1", "B": "x y"},
        cwd="~/distconsole",
        log_paths=(LogFile(f"{jd}/torchrun-0.out", "stdout", "launcher"),),
        ranks=(0, 1),
    )
    return JobPlan(
        job_id=job_id, name="ddp-x", kind=JobKind.DDP, world_size=2, launches=(launch,),
        job_dirs={"node0": jd}, master_addr="10.0.0.1", master_port=29500, total_steps=10,
        steps_per_rank=5, steps_dropped=0, hosts_involved=("node0",), warnings=("w",),
        uploads=(Upload("node0", f"{jd}/example_ddp.py", "ddp_train.py"),), fail_fast=False,
    )  # fmt: skip


def test_plan_survives_the_json_round_trip() -> None:
    plan = sample_plan()
    assert plan_from_json(plan_to_json(plan)) == plan


def test_history_records_states_per_inventory(tmp_path: Path) -> None:
    history = JobHistory(tmp_path / "jobs.sqlite3")
    inv = tmp_path / "hosts.yaml"
    history.add(sample_plan("a-1"), inventory=str(inv))
    history.add(sample_plan("b-2"), inventory=str(tmp_path / "other.yaml"))
    assert [r.id for r in history.unfinished(str(inv))] == ["a-1"]
    history.set_state("a-1", JobState.FAILED, failure="node0 torchrun-0 failed")
    record = JobHistory(tmp_path / "jobs.sqlite3").get("a-1")  # a second process reads it
    assert record.state is JobState.FAILED and record.ended is not None
    assert record.failure == "node0 torchrun-0 failed"
    assert record.fail_fast is False and record.hosts == ("node0",)
    assert history.unfinished(str(inv)) == []


def test_wrapper_quotes_everything_but_home(tmp_path: Path) -> None:
    host = Host(name="node0", address="local", setup="echo setup-ran")
    plan = sample_plan()
    script = wrapper_script(host, plan.job_id, plan.launches[0], str(tmp_path / "job"))
    # bash -n parses it; the hostile argument is one quoted word
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    assert "''\"'\"'; touch /tmp/x #'" in script
    assert "export B='x y'" in script
    assert 'cd -- "$HOME"/distconsole' in script
