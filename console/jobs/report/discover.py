"""Jobs discovered from the hosts: the hosts are the source of truth, the history a cache.

Every host's job directories are listed by ``hostprogs/jobs_scan.py`` (one command per
host, ``scan.py``): each job's ``job.json`` (what it is: written at launch), the host supervisor's
``supervisor.json`` (what happened: the LEADER's, the job's first host, is the job's
truth) and whether its processes and supervisor are alive. :func:`discover` merges that
into the history, so a console with an empty history (another laptop) lists the jobs
running or ended on the hosts, and every console shows the state the supervisors
recorded rather than its own guess. "unsupervised" is derived here: a host whose
``supervisor.pid`` is dead while the job's processes there still live.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from console.errors import TransportError
from console.inventory import Host, Inventory
from console.jobs.history import JobHistory
from console.jobs.models import JobState
from console.jobs.plan_json import plan_from_json
from console.jobs.report.scan import HostJob, scan_host
from console.jobs.report.settle import Settled, judged_alone, settle
from console.jobs.report.settle import failure_text as failure_text  # re-exported
from console.jobs.ssh.control import Connections
from console.jobs.ssh.remote_ops import jobctl_command

SUPERVISOR_STATES = {
    "running": JobState.RUNNING,
    "hung": JobState.RUNNING,  # still running, marked
    "succeeded": JobState.SUCCEEDED,
    "failed": JobState.FAILED,
    "stopped": JobState.STOPPED,
}


@dataclass
class DiscoveredJob:
    """One job, merged from every host that holds a directory of it."""

    job_id: str
    copies: dict[str, HostJob] = field(default_factory=dict)  # host -> its directory
    # Hosts the leader reads unsupervised (their supervisor's connection closed) that
    # this scan could not reach either: not a supervisor that died on a live host, a
    # host that went away (killed with a FIN). See :func:`lost_hosts`.
    lost: tuple[str, ...] = ()
    # The job's hosts this scan could not reach (host -> why): what runs there is unseen.
    unreachable: dict[str, str] = field(default_factory=dict)
    # The plan's notes from the history: the scan leaves a known job's plan out.
    plan_notes: tuple[str, ...] = ()

    @property
    def document(self) -> dict[str, Any] | None:
        """The job.json with a plan if any host's has one, else any job.json."""
        docs = [c.document for c in self.copies.values() if c.document]
        return next((d for d in docs if d.get("plan")), docs[0] if docs else None)

    @property
    def hosts(self) -> tuple[str, ...]:
        doc = self.document
        if doc and doc.get("hosts"):
            return tuple(str(h) for h in doc["hosts"])
        return tuple(self.copies)

    @property
    def leader(self) -> str:
        return self.hosts[0]

    @property
    def rendezvous_host(self) -> str | None:
        """--rendezvous-host: the leader's host, which trains nothing (job.json's)."""
        found = (self.document or {}).get("rendezvous_host")
        return found if isinstance(found, str) and found in self.hosts else None

    @property
    def truth(self) -> dict[str, Any] | None:
        """The leader's supervisor.json (the job's truth), else none."""
        copy = self.copies.get(self.leader)
        return copy.supervisor if copy is not None else None

    @property
    def unsupervised(self) -> list[str]:
        return [h for h, c in self.copies.items() if c.unsupervised]

    @property
    def modified(self) -> float | None:
        times = [c.modified for c in self.copies.values() if c.modified is not None]
        return max(times) if times else None

    @property
    def alive(self) -> int:
        return sum(c.alive for c in self.copies.values())

    def settled(self) -> Settled | None:
        """The state this scan records itself when nothing of the job is alive on the
        hosts it reached (``report/settle.py``); None otherwise."""
        return settle(self.hosts, self.copies, self.unreachable, self.document, self.plan_notes)

    def state(self) -> JobState:
        settled = self.settled()
        if settled is not None:
            return settled.state
        truth = self.truth
        state = None
        if truth is not None and truth.get("state") in SUPERVISOR_STATES:
            state = SUPERVISOR_STATES[truth["state"]]
        elif self.alive:
            state = JobState.RUNNING  # no supervisor record: what the process files say
        if state is JobState.RUNNING and self.lost and not self.scales_down():
            return JobState.LOST
        if state is not None:
            # A dead supervisor while the processes run on: nothing enforces fail-fast.
            unwatched = state is JobState.RUNNING and self.unsupervised
            return JobState.UNSUPERVISED if unwatched else state
        exits = [p.get("exit") for c in self.copies.values() for p in c.processes.values()]
        if not exits or any(h in self.unreachable for h in self.hosts):
            return JobState.LOST  # what ran on a host that does not answer is unknown
        if all(e == 0 for e in exits):
            return JobState.SUCCEEDED
        return JobState.FAILED

    def scales_down(self) -> bool:
        """An elastic job (--min-hosts) whose lost hosts leave enough behind: its
        supervisors take them as a scale-down and it runs on (not lost)."""
        truth = self.truth or {}
        floor = truth.get("min_hosts")
        now = truth.get("hosts_now")
        if not isinstance(floor, int) or not floor or not isinstance(now, list):
            return False
        left = [h for h in now if h not in self.lost]
        # The leader holds the rendezvous: on a rendezvous host, not among hosts_now.
        holder = self.leader in left or self.leader == self.rendezvous_host
        return holder and self.leader not in self.lost and len(left) >= floor

    @property
    def hung(self) -> bool:
        truth = self.truth or {}
        return truth.get("state") == "hung" or (
            bool(truth.get("hang")) and truth.get("state") == "running"
        )

    def first_failure(self) -> dict[str, Any] | None:
        failure = (self.truth or {}).get("first_failure")
        return failure if isinstance(failure, dict) else None

    def failure_text(self) -> str | None:
        settled = self.settled()
        if settled is not None and settled.failure is not None:
            return settled.failure
        failure = self.first_failure()
        if failure is None and self.lost and self.state() is JobState.LOST:
            return "\n".join(
                f"{host}: connection lost (its supervisor's connection closed and the "
                "host does not answer)"
                for host in self.lost
            )
        if failure is None:
            return None
        return failure_text(failure, self.document)

    def view(self) -> dict[str, Any]:
        """What the history keeps of the hosts' record (``JobRecord.host_view``)."""
        truth = self.truth or {}
        return {
            "supervisor": truth.get("state"),
            "leader": self.leader,
            "rendezvous_host": self.rendezvous_host,
            "hung": self.hung,
            "hang": truth.get("hang"),
            "unsupervised": self.unsupervised,
            "lost": list(self.lost),
            "settled": self.settled() is not None,  # by this scan: nothing was left alive
            "first_failure": self.first_failure(),
            "alive": self.alive,
            "ended_at": truth.get("ended_at"),
            "restarts": restarts_of(truth),
            "last_restart": truth.get("last_restart"),
            # Elastic membership (--min-hosts): the leader's scale-downs, each with its cause.
            "scale_downs": [d for d in truth.get("scale_downs") or () if isinstance(d, dict)],
            # --spare-hosts: planned spares, and those that joined (history.hosts_now).
            "spare_hosts": [str(h) for h in truth.get("spare_hosts") or ()],
            "joins": [j for j in truth.get("joins") or () if isinstance(j, dict)],
            # Per-rank pace (hostprogs/pace/): the leader's slow ranks and latest window.
            **{k: [x for x in truth.get(k) or () if isinstance(x, dict)] for k in PACE_KEYS},
        }


PACE_KEYS = ("slow_ranks", "rank_pace", "slow_periods")


def restarts_of(record: Mapping[str, Any]) -> int:
    """The restarts a supervisor record counts (0 before --max-restarts existed)."""
    count = record.get("restarts")
    return count if isinstance(count, int) and count > 0 else 0


@dataclass
class Discovery:
    jobs: dict[str, DiscoveredJob] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)  # host -> why
    # Job files left out, in words naming each file (a malformed job.json): the other
    # jobs are listed, and the command warns of these.
    skipped: list[str] = field(default_factory=list)

    def add(self, found: Iterable[HostJob]) -> None:
        for copy in found:
            if copy.problem:
                self.skipped.append(f"{copy.host}: {copy.dir}/job.json left out: {copy.problem}")
            self.jobs.setdefault(copy.job_id, DiscoveredJob(copy.job_id)).copies[copy.host] = copy


async def scan_hosts(
    connections: Connections, hosts: Sequence[Host], *, known: Iterable[str] = ()
) -> Discovery:
    """Scan every host at once; a host that cannot be scanned is named, never fatal."""
    known = sorted(known)
    outcomes = await asyncio.gather(
        *(scan_host(connections[h.name], known=known) for h in hosts), return_exceptions=True
    )
    found = Discovery()
    for host, outcome in zip(hosts, outcomes, strict=True):
        if isinstance(outcome, TransportError):
            found.unreachable[host.name] = str(outcome)
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            found.add(outcome)
    for job in found.jobs.values():
        job.unreachable = {h: found.unreachable[h] for h in job.hosts if h in found.unreachable}
        job.lost = lost_hosts(job, found.unreachable)
    return found


def lost_hosts(job: DiscoveredJob, unreachable: Mapping[str, str]) -> tuple[str, ...]:
    """Hosts of a running job that went away: the leader's supervisor saw their
    supervisor's connection close (which alone reads unsupervised: the supervisor may
    have died on a live host) and they do not answer SSH now either."""
    truth = job.truth or {}
    if job.hosts and job.truth is None and job.leader in unreachable:
        # The leader's host itself: a follower whose supervisor runs saw the leader's
        # connection close. Told it is lost, that follower fails the job naming it (the
        # rendezvous was there) instead of waiting on a leader that will not answer.
        return tuple(
            job.leader
            for c in job.copies.values()
            if c.supervisor_alive and judged_alone(c.supervisor or {}, job.leader)
        )[:1]
    if truth.get("state") != "running":
        return ()
    unsupervised = truth.get("unsupervised")
    named = unsupervised if isinstance(unsupervised, dict) else {}
    return tuple(h for h in job.hosts if h in named and h in unreachable)


async def tell_lost(connections: Connections, inventory: Inventory, job: DiscoveredJob) -> None:
    """``jobctl host-lost`` for each of the job's lost hosts on its other hosts, as a
    watching console does (``host_loss._tell_lost``): their supervisors then take it as lost
    and apply fail-fast, with no console left open. Best effort: a host that cannot be
    told learns nothing from it. Each host's job directory is the one its scan found
    (a job.json the console's history holds comes without its plan)."""
    by_name = {h.name: h for h in inventory.hosts}

    async def tell(host: str, lost: str) -> None:
        why = "the host does not answer"
        args = {"job_dir": job.copies[host].dir, "host": lost, "why": why}
        command = jobctl_command(by_name[host], "host-lost", args)
        with contextlib.suppress(TransportError):
            await connections[host].run(command, timeout=10)

    await asyncio.gather(
        *(
            tell(host, lost)
            for lost in job.lost
            for host in job.copies
            if host not in job.lost and host in by_name
        )
    )


def merge(discovery: Discovery, history: JobHistory, inventory: Inventory) -> list[str]:
    """Write what the hosts say into the history: jobs it lacks are added (from their
    job.json), and a job whose leader's supervisor recorded a state takes that state.
    Returns the ids the hosts settled (their state is the supervisor's)."""
    records = {r.id: r for r in history.records(inventory=inventory.path)}
    known = {job_id: r.state for job_id, r in records.items()}
    # Job ids are unique across inventories: a second file naming the same hosts (a
    # copy, a subset) sees jobs the history holds under the first; those stay its own.
    elsewhere = {r.id for r in history.summaries()} - known.keys()
    names = {h.name for h in inventory.hosts}
    settled = []
    for job in discovery.jobs.values():
        document = job.document
        if job.job_id in elsewhere:
            continue
        if job.job_id not in known:
            plan_data = (document or {}).get("plan")
            if not plan_data or not set(job.hosts) <= names:
                continue  # not this inventory's job, or a job.json without its plan
            try:
                plan = plan_from_json(json.dumps(plan_data))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:  # wrong types
                where = ", ".join(f"{c.host}: {c.dir}/job.json" for c in job.copies.values())
                first = (str(exc).splitlines() or [type(exc).__name__])[0]
                discovery.skipped.append(f"{where} left out: its plan is not readable ({first})")
                continue
            history.add(plan, inventory=inventory.path, started=_started(document))
        else:
            job.plan_notes = records[job.job_id].plan.notes
        verdict = job.settled()
        if verdict is not None and job.job_id in known and known[job.job_id].finished:
            continue  # settled before (by a console, a scan): what it recorded stays
        if job.truth is None and job.job_id in known and verdict is None and not job.lost:
            continue  # no supervisor: the console's re-attach (jobs.runner) decides
        state = job.state()
        ended = verdict.at if verdict is not None else job.view()["ended_at"]
        history.record_from_hosts(
            job.job_id,
            state,
            ended=(ended or job.modified) if state.finished else None,
            failure=job.failure_text(),
            view=job.view(),
        )
        if job.truth is not None or state is JobState.UNSUPERVISED or verdict or job.lost:
            settled.append(job.job_id)
    return settled


def _started(document: Mapping[str, Any] | None) -> float | None:
    value = (document or {}).get("created_at")
    return float(value) if isinstance(value, int | float) else None


async def discover(
    connections: Connections, inventory: Inventory, history: JobHistory
) -> tuple[Discovery, list[str]]:
    """Scan the inventory's hosts and merge (see :func:`merge`), the history in a thread."""
    known = await asyncio.to_thread(
        lambda: [r.id for r in history.summaries(inventory=inventory.path)]
    )
    found = await scan_hosts(connections, inventory.hosts, known=known)
    settled = await asyncio.to_thread(merge, found, history, inventory)
    await asyncio.gather(
        *(tell_lost(connections, inventory, j) for j in found.jobs.values() if j.lost)
    )
    return found, settled
