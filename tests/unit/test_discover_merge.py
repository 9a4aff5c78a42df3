"""discover.merge when two inventory files name the same hosts: a job the history holds
under one is seen again through the other (``jobs other.yaml`` raised sqlite's UNIQUE
constraint on jobs.id: the job was added a second time)."""

from __future__ import annotations

import json
from pathlib import Path

from console.inventory import Host, Inventory
from console.jobs.history import JobHistory
from console.jobs.models import JobState
from console.jobs.plan.planner import plan
from console.jobs.plan_json import plan_to_json
from console.jobs.report.discover import Discovery, merge
from console.jobs.report.scan import HostJob
from console.jobs.spec import make_spec

HOSTS = (Host(name="n0", address="10.0.0.1"), Host(name="n1", address="10.0.0.2"))


def found_on_hosts(job_id: str, planned_json: str) -> Discovery:
    document = {"id": job_id, "hosts": ["n0", "n1"], "plan": json.loads(planned_json)}
    found = Discovery()
    found.add(
        HostJob(
            host=name, job_id=job_id, dir=f"/w/{job_id}", document=document,
            supervisor={"state": "running", "first_failure": None}, supervisor_alive=True,
            processes={f"torchrun-{i}": {"alive": True}}, alive=1, modified=1.0e9,
        )
        for i, name in enumerate(("n0", "n1"))
    )  # fmt: skip
    return found


def test_a_job_recorded_under_another_inventory_file_is_left_to_it(tmp_path: Path) -> None:
    first = Inventory(path=str(tmp_path / "hosts.yaml"), hosts=HOSTS)
    copy = Inventory(path=str(tmp_path / "copy.yaml"), hosts=HOSTS)
    planned = plan(make_spec(kind="ddp", program="train.py"), first, job_id="job-1")
    history = JobHistory(tmp_path / "history.sqlite")
    history.add(planned, inventory=first.path)

    assert merge(found_on_hosts("job-1", plan_to_json(planned)), history, copy) == []
    assert [r.id for r in history.records(inventory=first.path)] == ["job-1"]
    assert history.records(inventory=copy.path) == []

    # A job the history lacks is still added under the inventory that found it.
    other = plan(make_spec(kind="ddp", program="train.py"), copy, job_id="job-2")
    assert merge(found_on_hosts("job-2", plan_to_json(other)), history, copy) == ["job-2"]
    [added] = history.records(inventory=copy.path)
    assert added.id == "job-2" and added.state is JobState.RUNNING
