"""Reading Slurm's own outputs (captured from the real slurmctld 22.05 of
tests/slurm_cluster.py) and the inventory's slurm: section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console import inventory
from console.errors import InventoryError
from console.jobs.models import JobState
from console.jobs.slurm.state import (
    from_jobcomp,
    from_squeue_json,
    submitted_id,
    task_failures,
)

# `squeue --json` of a pending job, the fields we read as slurmctld 22.05.8 wrote them.
SQUEUE = json.dumps(
    {
        "meta": {"Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}}},
        "jobs": [
            {"job_id": 1, "job_state": "RUNNING", "state_reason": "None", "nodes": "n[1-2]",
             "exit_code": 0},
            {"job_id": 2, "job_state": "PENDING", "state_reason": "Priority", "nodes": "",
             "exit_code": 0},
        ],
    }
)  # fmt: skip
# jobcomp/filetxt lines as slurmctld 22.05.8 wrote them here.
JOBCOMP = (
    "JobId=1 UserId=root(0) GroupId=root(0) Name=wrap JobState=COMPLETED Partition=test "
    "TimeLimit=UNLIMITED StartTime=2026-11-24T22:01:03 EndTime=2026-11-24T22:01:06 "
    "NodeList=n[1-2] NodeCnt=2 ProcCnt=2 WorkDir=/work/main/tests ReservationName= "
    "Tres=cpu=2,mem=2M,node=2,billing=2 Account= QOS= WcKey= Cluster=unknown "
    "SubmitTime=2026-11-24T22:01:01 EligibleTime=2026-11-24T22:01:01 DerivedExitCode=0:0 "
    "ExitCode=0:0 \n"
    "JobId=12 UserId=dctest0(1001) GroupId=dctest0(1001) Name=ddp JobState=FAILED "
    "Partition=test NodeList=n[1-2] NodeCnt=2 ExitCode=1:0 \n"
)
# The batch output of the failing test job (srun's own lines).
BATCH = """\
srun: error: n1: task 0: Exited with exit code 1
srun: launch/slurm: _step_signal: Terminating StepId=2.0
srun: error: n2: task 1: Exited with exit code 1
"""


def test_squeue_states_and_reason() -> None:
    running = from_squeue_json(SQUEUE, "1")
    pending = from_squeue_json(SQUEUE, "2")
    assert running is not None and pending is not None
    assert running.state is JobState.RUNNING
    assert running.describe() == "slurm 1 RUNNING on n[1-2]"
    assert pending.state is JobState.STARTING
    assert pending.describe() == "slurm 2 PENDING (Priority)"
    assert from_squeue_json(SQUEUE, "3") is None
    assert from_squeue_json("not json", "1") is None


def test_jobcomp_record() -> None:
    done = from_jobcomp(JOBCOMP, "1")
    failed = from_jobcomp(JOBCOMP, "12")
    assert done is not None and done.state is JobState.SUCCEEDED and done.exit_code == 0
    assert failed is not None and failed.state is JobState.FAILED and failed.exit_code == 1
    assert failed.nodes == "n[1-2]"
    assert from_jobcomp(JOBCOMP, "2") is None


def test_failed_tasks_in_order() -> None:
    tasks = task_failures(BATCH)
    assert [(t.node, t.tasks, t.exit_code) for t in tasks] == [("n1", "0", 1), ("n2", "1", 1)]
    assert tasks[0].describe() == "n1 task 0: Exited with exit code 1"


def test_submitted_id() -> None:
    assert submitted_id("12\n") == "12"
    assert submitted_id("13;cluster\n") == "13"
    assert submitted_id("sbatch: error: Batch job submission failed\n") is None


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("  login: nope\n", "slurm.login: 'nope' is not a host of this inventory"),
        ("  login: a\n  partition: two words\n", "slurm.partition: 'two words'"),
        ("  login: a\n  sbatch_options: [qos high]\n", "slurm.sbatch_options: 'qos high'"),
        ("  login: a\n  acount: ml\n", "slurm.acount: unknown key; did you mean 'account'?"),
        ("  partition: gpu\n", "slurm.login"),
    ],
)
def test_slurm_section_problems_name_the_key(tmp_path: Path, section: str, message: str) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts:\n  - name: a\n    address: 127.0.0.1\nslurm:\n" + section)
    with pytest.raises(InventoryError) as caught:
        inventory.load(path)
    assert message in str(caught.value)


def test_slurm_section_read(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text(
        "hosts:\n  - name: a\n    address: 127.0.0.1\n"
        "slurm:\n  login: a\n  partition: gpu\n  time: 30\n  sbatch_options: [--qos=high]\n"
    )
    settings = inventory.load(path).slurm
    assert settings is not None
    assert (settings.login, settings.partition, settings.time) == ("a", "gpu", "30")
    assert settings.sbatch_options == ("--qos=high",)
