"""Issue 31 item 5: an elastic job (ddp --min-hosts, Horovod elastic) survives any host
but the first, whose agent holds the rendezvous and whose supervisor leads. The plan
(``plan``, ``launch``, the form's preview) says so in one line naming the host, and a
failure for that host's loss repeats the line: the scan's settled failure
(report/settle.py) and the watching console's (ssh/control.py first_host_told)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from console.commands.plan import format_plan
from console.inventory import Inventory
from console.jobs.history import JobHistory
from console.jobs.models import JobPlan, JobState
from console.jobs.plan.placement import first_host_said
from console.jobs.plan.planner import plan
from console.jobs.plan_json import plan_to_json
from console.jobs.report.discover import Discovery, lost_hosts, merge
from console.jobs.spec import make_spec
from console.jobs.ssh.control import first_host_told
from console.jobs.ssh.job import Job, JobFailure
from console.jobs.ssh.jobctl_reports import SupervisorRecord
from console.jobs.ssh.watch import JobWatch
from console.ui.jobs_service import plan_preview
from tests.unit.test_job_final_states import HOSTS, T0, followers_alone, job

INVENTORY = Inventory(path="/nowhere/hosts.yaml", hosts=HOSTS)


def ddp(**extra: object) -> JobPlan:
    fields: dict[str, object] = {"kind": "ddp", "program": "train.py", "max_restarts": 2}
    return plan(make_spec(**{**fields, **extra}), INVENTORY, job_id="job-1")


def horovod(**extra: object) -> JobPlan:
    fields: dict[str, object] = {
        "kind": "horovod", "program": "example:horovod", "max_restarts": 2,
        "horovod_elastic": True,
    }  # fmt: skip
    return plan(make_spec(**{**fields, **extra}), INVENTORY, job_id="job-1")


def loss_notes(planned: JobPlan) -> list[str]:
    return [n for n in planned.notes if "ends the job" in n]


def test_an_elastic_plan_says_in_one_line_that_losing_the_first_host_ends_the_job() -> None:
    [line] = loss_notes(ddp(min_hosts=2))
    assert line.startswith("Losing n0 ends the job: it holds the rendezvous (torchrun's c10d"), line
    assert "leader supervisor" in line and "name your steadiest host first (--hosts" in line
    # The way round issue 31 built: a rendezvous host that trains nothing.
    assert "(--rendezvous-host HOST) so that any host may be lost" in line
    # The host named is whichever comes first, as --hosts orders them.
    [moved] = loss_notes(ddp(min_hosts=2, hosts=["n2", "n0", "n1"]))
    assert moved.startswith("Losing n2 ends the job:"), moved
    # Horovod elastic: the driver (horovodrun) runs on the first host, with or without
    # --min-hosts.
    for planned in (horovod(), horovod(min_hosts=2)):
        [hvd] = loss_notes(planned)
        assert hvd.startswith("Losing n0 ends the job: it holds horovodrun (Horovod's driver"), hvd


def test_jobs_that_lose_any_host_anyway_get_no_such_line() -> None:
    # Not elastic: every host's loss ends it, the first is nothing special.
    assert loss_notes(ddp()) == [] and loss_notes(ddp(max_restarts=0)) == []
    assert loss_notes(horovod(horovod_elastic=False)) == []
    # One host: there is no other host to go on with.
    assert loss_notes(ddp(min_hosts=1, hosts=["n1"])) == []


def test_plan_and_the_forms_preview_show_the_line() -> None:
    planned = ddp(min_hosts=2)
    [line] = loss_notes(planned)
    assert line in format_plan(planned).splitlines()  # distconsole plan (launch: PlanNote)
    assert line in plan_preview(planned).splitlines()  # the launch form's preview


def elastic_document() -> dict[str, object]:
    """The job.json a scan reads (remote_ops: the plan as JSON)."""
    names = [h.name for h in HOSTS]
    return {"id": "job-1", "hosts": names, "plan": json.loads(plan_to_json(ddp(min_hosts=2)))}


def test_the_settled_failure_of_a_lost_first_host_repeats_the_line() -> None:
    document = elastic_document()
    followers = [replace(c, document=document) for c in followers_alone()]
    found = job(*followers, unreachable={"n0": "n0: connection refused"})
    assert found.state() is JobState.FAILED
    first, second, *rest = (found.failure_text() or "").splitlines()
    assert first.startswith("n0: host lost (supervision lost on n0 at "), first
    assert second.startswith("Losing n0 ends the job: it holds the rendezvous"), second
    assert any("then, with the rendezvous on n0 gone" in line for line in rest), rest
    # A job whose plan said nothing of it (not elastic, or planned before this line).
    plain = job(*followers_alone(), unreachable={"n0": "n0: connection refused"})
    assert "ends the job" not in (plain.failure_text() or "")


def test_a_known_jobs_scan_takes_the_line_from_the_history(tmp_path: Path) -> None:
    """The scan leaves a known job's plan out of its job.json (jobs_scan.py): the line
    comes from the plan the console's history holds (a detached launch, then jobs)."""
    planned = ddp(min_hosts=2)
    history = JobHistory(tmp_path / "history.sqlite")
    history.add(planned, inventory=INVENTORY.path, state=JobState.RUNNING)
    scanned = {"id": "job-1", "hosts": [h.name for h in HOSTS]}  # no "plan"
    found = Discovery(unreachable={"n0": "n0: connection refused"})
    found.add(replace(c, document=scanned) for c in followers_alone())
    for one in found.jobs.values():
        one.unreachable = dict(found.unreachable)
        one.lost = lost_hosts(one, found.unreachable)
    assert merge(found, history, INVENTORY) == ["job-1"]
    record = history.get("job-1")
    assert record.state is JobState.FAILED
    lines = (record.failure or "").splitlines()
    assert lines[0].startswith("n0: host lost") and lines[1].startswith("Losing n0 ends"), lines


def test_a_watching_console_that_lost_the_first_host_repeats_the_line(tmp_path: Path) -> None:
    planned = ddp(min_hosts=2)
    watched = Job(planned, inventory=INVENTORY.path, started=T0)
    watched.supervisors = {
        c.host: SupervisorRecord.from_json(
            dict(c.supervisor or {}, host=c.host, leader=False, alive=False)
        )
        for c in followers_alone()
    }
    watched.lost_hosts["n0"] = "connection refused"
    watched.failure = JobWatch._leader_lost(watched)
    # The watch finishes the job (no history, no host sessions to close here).
    JobWatch({}, INVENTORY)._finish(watched, JobState.FAILED)
    assert watched.failure is not None and watched.state is JobState.FAILED
    lines = watched.failure.describe().splitlines()
    assert lines[0].startswith("n0: host lost (connection lost: connection refused)"), lines
    assert lines[1] == first_host_said(planned.notes, "n0"), lines
    first_host_told(watched)  # told once, however often the job is finished
    assert watched.failure.describe().count("Losing n0") == 1
    # Another host lost: the job could have gone on; its failure gets no such line.
    other = Job(planned, inventory=INVENTORY.path, started=T0)
    other.lost_hosts["n1"] = "connection refused"
    other.failure = JobFailure("n1", "", (), None, "connection lost (connection refused)")
    first_host_told(other)
    assert "ends the job" not in other.failure.describe()
