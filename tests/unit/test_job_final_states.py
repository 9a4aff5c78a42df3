"""A job's state is the truth (issue 29, item 2): a job nothing of which is alive on
any host is settled by the scan that sees it (report/settle.py), a lost leader's host is
named as the cause, and final states are final in the history: a host that comes back
with its stale ``supervisor.json`` saying running never revives the job.

The scans are built as ``hostprogs/jobs_scan.py`` prints them (HostJob); the end-to-end
case on real sshd hosts is tests/integration/test_leader_lost.py."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from console.inventory import Host, Inventory
from console.jobs.history import JobHistory
from console.jobs.models import JobState
from console.jobs.plan.planner import plan
from console.jobs.plan_json import plan_to_json
from console.jobs.report.bundle import summary_lines
from console.jobs.report.discover import DiscoveredJob, Discovery, lost_hosts, merge, tell_lost
from console.jobs.report.scan import HostJob, scan_host
from console.jobs.report.settle import settle
from console.jobs.spec import make_spec
from console.jobs.ssh.job import Job
from console.jobs.ssh.jobctl_reports import SupervisorRecord
from console.jobs.ssh.watch import JobWatch
from console.transport.local import LocalConnection

HOSTS = tuple(Host(name=f"n{i}", address=f"10.0.0.{i + 1}") for i in range(3))
NAMES = [h.name for h in HOSTS]
T0 = 1.7e9
RENDEZVOUS_ERROR = {
    "host": "n1",
    "process": "torchrun-1",
    "rank": None,
    "ranks": [1],
    "exit_code": 1,
    "signal": None,
    "reason": "exit status 1",
    "lines": ["torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: store gone"],
    "at": T0 + 20,
}


def copy(
    host: str,
    *,
    state: str | None = "running",
    supervisor_alive: bool | None = False,
    alive: int = 0,
    exit_code: int | None = None,
    unsupervised: dict[str, Any] | None = None,
    first_failure: dict[str, Any] | None = None,
    stop_requested: float | None = None,
    document: dict[str, Any] | None = None,
) -> HostJob:
    document = document or {"id": "job-1", "hosts": NAMES}
    index = NAMES.index(host)
    record = None
    if state is not None:
        record = {
            "state": state,
            "heartbeat": T0 + 10,
            "ended_at": T0 + 21 if state != "running" else None,
            "first_failure": first_failure,
            "unsupervised": unsupervised or {},
        }
    return HostJob(
        host=host, job_id="job-1", dir="/w/job-1", document=document,
        supervisor=record, supervisor_alive=supervisor_alive,
        processes={f"torchrun-{index}": {"alive": alive > 0, "exit": exit_code}},
        alive=alive, modified=T0 + 30, stop_requested=stop_requested,
    )  # fmt: skip


def job(*copies: HostJob, unreachable: dict[str, str] | None = None) -> DiscoveredJob:
    found = DiscoveredJob("job-1", {c.host: c for c in copies})
    found.unreachable = dict(unreachable or {})
    found.lost = lost_hosts(found, found.unreachable)
    return found


def followers_alone() -> list[HostJob]:
    """n1 and n2 after n0 (the leader, the rendezvous) was killed whole: its supervisor's
    connection closed, their torchrun failed on the vanished store, they judged alone."""
    closed = {"n0": {"at": T0 + 15, "why": "its connection closed (connection closed)"}}
    return [
        copy(h, state="failed", exit_code=1, unsupervised=closed, first_failure=failure)
        for h, failure in (("n1", RENDEZVOUS_ERROR), ("n2", dict(RENDEZVOUS_ERROR, host="n2")))
    ]


def test_a_lost_leader_host_is_the_cause_not_the_followers_rendezvous_error() -> None:
    found = job(*followers_alone(), unreachable={"n0": "n0: connection refused"})
    assert found.state() is JobState.FAILED
    text = found.failure_text() or ""
    first, *rest = text.splitlines()
    assert first.startswith("n0: host lost (supervision lost on n0 at "), text
    assert "connection closed" in first and "does not answer: n0: connection refused" in first
    # The followers' failures stay, told as what followed.
    assert any("then, with the rendezvous on n0 gone: n1 torchrun-1" in line for line in rest)


def test_the_leader_host_back_with_its_stale_record_reads_supervision_lost() -> None:
    # A console with no history of the job (another laptop), after n0 came back.
    found = job(copy("n0"), *followers_alone())
    assert found.state() is JobState.FAILED
    assert (found.failure_text() or "").startswith("n0: supervision lost on n0 at "), (
        found.failure_text()
    )


def test_followers_finishing_after_their_verdict_never_read_failed_without_a_cause() -> None:
    """The scan that lands while the followers' supervisors linger after their final
    record (leftovers killed) settled the job failed with no failure at all: the exit
    files of the hosts it saw, the leader's unseen."""
    lingering = [HostJob(**{**_fields(c), "supervisor_alive": True}) for c in followers_alone()]
    found = job(*lingering, unreachable={"n0": "refused"})
    assert found.state() is JobState.FAILED
    assert (found.failure_text() or "").startswith("n0: host lost"), found.failure_text()
    # Still deciding (no final record yet) with nothing running: not final, not silent.
    deciding = [copy(h, supervisor_alive=True, exit_code=1) for h in ("n1", "n2")]
    assert job(*deciding, unreachable={"n0": "refused"}).state() is JobState.LOST


def test_final_states_are_final_in_the_history(tmp_path: Path) -> None:
    inventory = Inventory(path=str(tmp_path / "hosts.yaml"), hosts=HOSTS)
    planned = plan(make_spec(kind="ddp", program="train.py"), inventory, job_id="job-1")
    history = JobHistory(tmp_path / "history.sqlite")
    history.add(planned, inventory=inventory.path, state=JobState.RUNNING)
    document = {"id": "job-1", "hosts": NAMES, "plan": json.loads(plan_to_json(planned))}

    def discovery(*copies: HostJob, unreachable: dict[str, str] | None = None) -> Discovery:
        found = Discovery(unreachable=dict(unreachable or {}))
        found.add(HostJob(**{**_fields(c), "document": document}) for c in copies)
        for one in found.jobs.values():
            one.unreachable = dict(found.unreachable)
            one.lost = lost_hosts(one, found.unreachable)
        return found

    # n0 gone: the scan records the job failed, naming n0; it is settled (no re-attach).
    gone = discovery(*followers_alone(), unreachable={"n0": "connection refused"})
    assert merge(gone, history, inventory) == ["job-1"]
    record = history.get("job-1")
    assert record.state is JobState.FAILED and record.ended is not None
    assert (record.failure or "").startswith("n0: host lost"), record.failure
    # n0 back: its supervisor.json still says running, its processes are gone.
    merge(discovery(copy("n0"), *followers_alone()), history, inventory)
    # ... and even a scan that saw it running again (a stale pid taken for alive).
    merge(
        discovery(copy("n0", supervisor_alive=True, alive=1), *followers_alone()),
        history,
        inventory,
    )
    for _ in range(2):
        history.set_state("job-1", JobState.RUNNING)
        history.set_state("job-1", JobState.LOST)
    again = history.get("job-1")
    assert again.state is JobState.FAILED and again.ended == record.ended
    assert again.failure == record.failure
    assert again.summary()["state"] == "failed"
    # A final state may still be refined (a stop recorded later).
    history.set_state("job-1", JobState.STOPPED)
    assert history.get("job-1").state is JobState.STOPPED


def test_the_report_summary_tells_the_settled_state_not_a_stale_record(tmp_path: Path) -> None:
    inventory = Inventory(path=str(tmp_path / "hosts.yaml"), hosts=HOSTS)
    planned = plan(make_spec(kind="ddp", program="train.py"), inventory, job_id="job-1")
    history = JobHistory(tmp_path / "history.sqlite")
    history.add(planned, inventory=inventory.path, state=JobState.RUNNING)
    found = job(copy("n0"), *followers_alone())  # n0 back, its record stale
    history.record_from_hosts(
        "job-1", found.state(), ended=None, failure=found.failure_text(), view=found.view()
    )
    lines = summary_lines(history.get("job-1"), {"host": "n0", "state": "running"})
    assert lines[1] == "state: failed (settled by a console: nothing of the job was left alive)"
    assert any(line.startswith("failure: n0: supervision lost on n0 at ") for line in lines)
    # A final record of the leader's own stays its word.
    record = history.get("job-1")
    plain = replace(record, host_view={**(record.host_view or {}), "settled": False})
    lines = summary_lines(plain, {"host": "n0", "state": "failed"})
    assert lines[1] == "state: failed (recorded by n0's supervisor)"


def _fields(c: HostJob) -> dict[str, Any]:
    return {name: getattr(c, name) for name in HostJob.__dataclass_fields__}


def test_nothing_alive_and_a_running_record_settles_by_what_the_files_say() -> None:
    asked = T0 + 25
    stopped = job(copy("n0", stop_requested=asked), copy("n1"), copy("n2"))
    assert stopped.state() is JobState.STOPPED and stopped.failure_text() is None
    # A stop run after the followers had recorded the job's end (n0 lost): still failed.
    late = [HostJob(**{**_fields(c), "stop_requested": T0 + 60}) for c in followers_alone()]
    assert job(copy("n0", stop_requested=T0 + 60), *late).state() is JobState.FAILED
    ok = job(*(copy(h, exit_code=0) for h in NAMES))
    assert ok.state() is JobState.SUCCEEDED
    killed = job(copy("n0"), copy("n1", exit_code=1), copy("n2"))
    assert killed.state() is JobState.FAILED
    assert "no process or supervisor of the job is alive" in (killed.failure_text() or "")


def test_what_still_lives_or_cannot_be_seen_is_never_settled() -> None:
    # A process alive on one host (no supervisor watches it), or one supervisor alive.
    assert job(copy("n0"), copy("n1", alive=1), copy("n2")).state() is JobState.UNSUPERVISED
    assert job(copy("n0", supervisor_alive=True), copy("n1"), copy("n2")).settled() is None
    # A follower's host does not answer: nothing final can be said.
    unseen = job(copy("n0"), copy("n1"), unreachable={"n2": "timed out"})
    assert unseen.state() is JobState.LOST
    # The leader's host does not answer and no follower was supervised (MPI's ranks
    # run under the launcher on n0): nothing to go on.
    mpi = job(copy("n1", state=None, supervisor_alive=None), unreachable={"n0": "refused"})
    assert settle(mpi.hosts, mpi.copies, mpi.unreachable) is None
    # The leader's final word reached the followers before its host went: it stands.
    heard = [copy(h, state="succeeded", exit_code=0) for h in ("n1", "n2")]
    assert job(*heard, unreachable={"n0": "refused"}).state() is JobState.SUCCEEDED


def test_followers_still_running_are_told_their_leader_is_lost() -> None:
    closed = {"n0": {"at": T0 + 15, "why": "its connection closed"}}
    running = [copy(h, supervisor_alive=True, alive=1, unsupervised=closed) for h in ("n1", "n2")]
    found = job(*running, unreachable={"n0": "refused"})
    assert found.lost == ("n0",)
    assert found.state() is JobState.LOST
    assert (found.failure_text() or "").startswith("n0: connection lost"), found.failure_text()
    # Reachable leader, or a follower that never saw its leader's connection close: no.
    assert job(*running).lost == ()
    quiet = [copy(h, supervisor_alive=True, alive=1) for h in ("n1", "n2")]
    assert job(*quiet, unreachable={"n0": "refused"}).lost == ()


async def test_the_scan_checks_a_supervisor_pid_is_the_jobs_and_reads_a_stop(
    tmp_path: Path,
) -> None:
    jobs = tmp_path / ".distconsole" / "jobs"
    stale, live = jobs / "stale-1", jobs / "live-1"
    for job_dir in (stale, live):
        job_dir.mkdir(parents=True)
        (job_dir / "supervisor.json").write_text('{"state": "running"}')
    (stale / "stop-requested").write_text("1\n")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ours = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", str(live / "supervisor.py")]
    )
    try:
        # A host killed whole and back: its stale pid now belongs to another process.
        (stale / "supervisor.pid").write_text(f"{other.pid}\n")
        (live / "supervisor.pid").write_text(f"{ours.pid}\n")
        host = Host(name="local", address="local", work_dir=str(tmp_path))
        found = {j.job_id: j for j in await scan_host(LocalConnection(host))}
    finally:
        for proc in (other, ours):
            proc.kill()
            proc.wait()
    assert found["stale-1"].supervisor_alive is False
    assert found["stale-1"].stop_requested is not None
    assert found["live-1"].supervisor_alive is True and found["live-1"].stop_requested is None


def test_a_watching_console_that_lost_the_leader_names_it_not_the_followers_error(
    tmp_path: Path,
) -> None:
    """An attached launch (the console's watch): node0's host was lost, the followers
    judged alone and recorded their torchrun's RendezvousConnectionError."""
    inventory = Inventory(path=str(tmp_path / "hosts.yaml"), hosts=HOSTS)
    planned = plan(make_spec(kind="ddp", program="train.py"), inventory, job_id="job-1")
    watched = Job(planned, inventory=inventory.path, started=T0)
    followers = {
        c.host: SupervisorRecord.from_json(
            dict(c.supervisor or {}, host=c.host, leader=False, alive=False)
        )
        for c in followers_alone()
    }
    watched.supervisors = dict(followers)
    assert JobWatch._leader_lost(watched) is None  # this console did not lose n0
    watched.lost_hosts["n0"] = "connection refused"
    found = JobWatch._leader_lost(watched)
    assert found is not None
    first = found.describe().splitlines()[0]
    assert first.startswith("n0: host lost (connection lost: connection refused)"), first
    assert "then n1 torchrun-1 (rank 1) failed: exit status 1" in first, first
    # The leader's own final word, forwarded to the followers: it stands.
    heard = {h: replace(r, unsupervised=()) for h, r in followers.items()}
    watched.supervisors = heard
    assert JobWatch._leader_lost(watched) is None


async def test_followers_of_a_known_job_are_told_their_leader_is_lost(tmp_path: Path) -> None:
    """The console that launched the job holds it: the scan sends its job.json without the
    plan, and the followers were told nothing (the plan's job_dirs were the only source).
    ``jobctl host-lost`` runs for real here, through the local transport."""
    job_dir = tmp_path / "jobs" / "job-1"
    job_dir.mkdir(parents=True)
    follower = Host(name="n1", address="local", work_dir=str(tmp_path))
    inventory = Inventory(path=str(tmp_path / "hosts.yaml"), hosts=(HOSTS[0], follower))
    closed = {"n0": {"at": T0 + 15, "why": "its connection closed"}}
    running = copy("n1", supervisor_alive=True, alive=1, unsupervised=closed)
    found = job(HostJob(**{**_fields(running), "dir": str(job_dir)}), unreachable={"n0": "refused"})
    assert found.lost == ("n0",) and "plan" not in (found.document or {})
    await tell_lost({"n1": LocalConnection(follower)}, inventory, found)
    assert (job_dir / "lost-hosts" / "n0").read_text().strip() == "the host does not answer"
