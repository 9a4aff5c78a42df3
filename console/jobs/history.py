"""Job history: one SQLite file in the user data directory.

``DISTCONSOLE_DATA_DIR`` overrides the directory (tests point it at a temporary one).
The plan is stored whole (JSON: ``plan_json.py``), so a later process can re-attach to a
job from its row alone: the plan says which hosts, which processes and where their files are.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

from console.errors import JobError
from console.jobs.membership import hosts_now, job_hosts, joined, with_spares
from console.jobs.membership import membership as membership  # re-exported
from console.jobs.models import JobKind, JobPlan, JobState
from console.jobs.plan_json import plan_from_json, plan_hosts, plan_to_json
from console.jobs.private import private_dir, private_file

DATA_DIR_ENV = "DISTCONSOLE_DATA_DIR"
DB_NAME = "jobs.sqlite3"

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    started REAL NOT NULL,
    ended REAL,
    hosts TEXT NOT NULL,
    inventory TEXT NOT NULL,
    fail_fast INTEGER NOT NULL DEFAULT 1,
    plan TEXT NOT NULL,
    failure TEXT
);
CREATE INDEX IF NOT EXISTS jobs_by_inventory ON jobs (inventory, started);
"""
# Columns added after the first release, added to an older file when it is opened.
ADDED_COLUMNS = {"host_view": "TEXT"}
COLUMNS = (
    "id, name, kind, state, started, ended, hosts, inventory, fail_fast, plan, failure, host_view"
)
# Final states are final: an update to an unfinished state (its parameter, 0) leaves a
# final row alone. A host that comes back after its job was settled (its supervisor.json
# stale at "running") must not revive the job; a final state may still be refined.
FINAL_VALUES = ", ".join(f"'{s.value}'" for s in JobState if s.finished)
STILL_OPEN = f"(? OR state NOT IN ({FINAL_VALUES}))"


def data_dir() -> Path:
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_data_dir("distconsole", appauthor=False))


def inventory_key(path: str) -> str:
    """How the history names an inventory: its absolute path (same file, any cwd)."""
    return str(Path(path).expanduser().resolve())


@dataclass(frozen=True, slots=True)
class JobRecord:
    id: str
    name: str
    kind: JobKind
    state: JobState
    started: float
    ended: float | None
    hosts: tuple[str, ...]
    inventory: str
    fail_fast: bool
    plan: JobPlan
    failure: str | None
    # What the hosts' supervisors recorded (console/jobs/report/discover.py DiscoveredJob.view):
    # "supervisor" state, "hung", "hang", "unsupervised" hosts, "first_failure"; None
    # until a console read the job from its hosts.
    host_view: dict[str, Any] | None = None

    def summary(self) -> dict[str, Any]:
        """The fields ``distconsole jobs --json`` prints."""
        view = self.host_view or {}
        elastic = with_spares(view, self.plan)  # the plan names the spares before any read
        return {
            "id": self.id,
            "name": self.name,
            "kind": self.kind.value,
            "state": self.state.value,
            "started": self.started,
            "ended": self.ended,
            "hosts": job_hosts(self.hosts, elastic),  # as planned: not its spares
            # --rendezvous-host: holds the store and the leader, trains nothing.
            "rendezvous_host": elastic.get("rendezvous_host"),
            "failure": self.failure,
            "first_failure": view.get("first_failure"),
            "hung": bool(view.get("hung")),
            "unsupervised": bool(view.get("unsupervised")),
            "unsupervised_hosts": list(view.get("unsupervised") or ()),
            "restarts": int(view.get("restarts") or 0),  # --max-restarts: restarts done
            # Elastic membership (--min-hosts): the hosts in the job now, of how many;
            # --spare-hosts: the planned spares, and those that joined the job.
            "hosts_now": hosts_now(self.hosts, elastic),
            "hosts_total": len(job_hosts(self.hosts, elastic)),
            "spare_hosts": list(elastic["spare_hosts"]),
            "spares_joined": joined(elastic),
            "slow_ranks": list(view.get("slow_ranks") or ()),  # hostprogs/pace/score.py
        }


@dataclass(frozen=True, slots=True)
class JobSummary:
    """A history row without its plan: what a list of jobs shows."""

    id: str
    name: str
    kind: JobKind
    state: JobState
    started: float
    ended: float | None
    hosts: tuple[str, ...]
    world_size: int
    failure: str | None
    host_view: dict[str, Any] | None = None
    rendezvous_host: str | None = None  # --rendezvous-host: the leader's, training nothing


class JobHistory:
    """The jobs table. Every call opens its own short transaction (several processes —
    the console and CLI commands — may share the file)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or data_dir() / DB_NAME
        try:
            # Its rows hold each job's plan: environment, --env secrets included.
            # Its own folder (the default) is made private; one the user named is left.
            default = path is None and not os.environ.get(DATA_DIR_ENV)
            private_dir(self.path.parent, tighten_existing=default)
            private_file(self.path)
            with self._db() as db:
                db.executescript(SCHEMA)
                present = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
                for column, kind in ADDED_COLUMNS.items():
                    if column not in present:
                        db.execute(f"ALTER TABLE jobs ADD COLUMN {column} {kind}")
        except (OSError, sqlite3.Error) as exc:
            raise JobError(f"job history {self.path}: {exc}") from exc

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path, timeout=10.0)) as db, db:
            yield db

    def add(
        self,
        plan: JobPlan,
        *,
        inventory: str,
        state: JobState = JobState.STARTING,
        started: float | None = None,
    ) -> JobRecord:
        record = JobRecord(
            id=plan.job_id,
            name=plan.name,
            kind=plan.kind,
            state=state,
            started=time.time() if started is None else started,
            ended=None,
            hosts=plan_hosts(plan),
            inventory=inventory_key(inventory),
            fail_fast=plan.fail_fast,
            plan=plan,
            failure=None,
        )
        with self._db() as db:
            db.execute(
                "INSERT INTO jobs (id, name, kind, state, started, ended, hosts, inventory,"
                " fail_fast, plan, failure) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.id,
                    record.name,
                    record.kind.value,
                    record.state.value,
                    record.started,
                    None,
                    json.dumps(list(record.hosts)),
                    record.inventory,
                    int(record.fail_fast),
                    plan_to_json(plan),
                    None,
                ),
            )
        return record

    def set_plan(self, job_id: str, plan: JobPlan) -> None:
        """Replace the job's plan (a scheduler's backend adds what it learns once the job
        runs, e.g. which node runs each Slurm task); its hosts stay as added."""
        with self._db() as db:
            db.execute("UPDATE jobs SET plan = ? WHERE id = ?", (plan_to_json(plan), job_id))

    def set_state(
        self,
        job_id: str,
        state: JobState,
        *,
        failure: str | None = None,
        ended: float | None = None,
    ) -> None:
        if ended is None and (state.finished or state is JobState.LOST):
            ended = time.time()
        with self._db() as db:
            db.execute(
                "UPDATE jobs SET state = ?, ended = COALESCE(?, ended),"
                f" failure = COALESCE(?, failure) WHERE id = ? AND {STILL_OPEN}",
                (state.value, ended, failure, job_id, int(state.finished)),
            )

    def record_from_hosts(
        self,
        job_id: str,
        state: JobState,
        *,
        ended: float | None,
        failure: str | None,
        view: dict[str, Any],
    ) -> None:
        """The state the job's hosts recorded (they are the truth: a running job is
        running even if this history had guessed it lost), but never a final job back
        to an unfinished state (a host that comes back with a stale record). A failure
        this history already holds for a job it holds as failed is kept: the console that
        watched it wrote the same failure with its cause (``first error:``); a job that
        did not fail has none."""
        if state.finished and ended is None:
            ended = time.time()
        keep = state is JobState.FAILED
        with self._db() as db:
            db.execute(
                "UPDATE jobs SET state = ?, ended = ?,"
                " failure = CASE WHEN ? AND state = 'failed' THEN COALESCE(failure, ?) ELSE ? END,"
                f" host_view = ? WHERE id = ? AND {STILL_OPEN}",
                (
                    state.value,
                    ended if state.finished else None,
                    int(keep),
                    failure,
                    failure,
                    json.dumps(view),
                    job_id,
                    int(state.finished),
                ),
            )

    def get(self, job_id: str) -> JobRecord:
        with self._db() as db:
            row = db.execute(f"SELECT {COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobError(f"no job {job_id!r} in the history ({self.path})")
        return _record(row)

    def records(
        self, *, inventory: str | None = None, states: Sequence[JobState] | None = None
    ) -> list[JobRecord]:
        """Newest first; optionally only one inventory's jobs and only some states."""
        query = f"SELECT {COLUMNS} FROM jobs"
        where: list[str] = []
        params: list[Any] = []
        if inventory is not None:
            where.append("inventory = ?")
            params.append(inventory_key(inventory))
        if states:
            where.append("state IN ({})".format(", ".join("?" for _ in states)))
            params += [s.value for s in states]
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY started DESC"
        with self._db() as db:
            rows = db.execute(query, params).fetchall()
        return [_record(row) for row in rows]

    def summaries(self, *, inventory: str | None = None) -> list[JobSummary]:
        """Newest first, like :meth:`records`, without reading or decoding the plans: a
        screen that re-reads the list every few seconds pays for the columns it shows."""
        query = (
            "SELECT id, name, kind, state, started, ended, hosts,"
            " json_extract(plan, '$.world_size'), failure, host_view,"
            " json_extract(plan, '$.rendezvous_host') FROM jobs"
        )
        params: list[Any] = []
        if inventory is not None:
            query += " WHERE inventory = ?"
            params.append(inventory_key(inventory))
        query += " ORDER BY started DESC"
        with self._db() as db:
            rows = db.execute(query, params).fetchall()
        return [_summary(row) for row in rows]

    def unfinished(self, inventory: str | None = None) -> list[JobRecord]:
        """Jobs that may still have processes on their hosts (to re-attach to)."""
        return self.records(
            inventory=inventory,
            states=(JobState.STARTING, JobState.RUNNING, JobState.LOST, JobState.UNSUPERVISED),
        )


def _record(row: tuple[Any, ...]) -> JobRecord:
    (
        job_id,
        name,
        kind,
        state,
        started,
        ended,
        hosts,
        inventory,
        fail_fast,
        plan,
        failure,
        view,
    ) = row
    return JobRecord(
        id=job_id,
        name=name,
        kind=JobKind(kind),
        state=JobState(state),
        started=float(started),
        ended=None if ended is None else float(ended),
        hosts=tuple(json.loads(hosts)),
        inventory=inventory,
        fail_fast=bool(fail_fast),
        plan=plan_from_json(plan),
        failure=failure,
        host_view=json.loads(view) if view else None,
    )


def _summary(row: Sequence[Any]) -> JobSummary:
    """A row of ``JobHistory.summaries``' query (its columns in that order)."""
    job_id, name, kind, state, started, ended, hosts, size, failure, view, rendezvous = row
    return JobSummary(
        id=job_id,
        name=name,
        kind=JobKind(kind),
        state=JobState(state),
        started=float(started),
        ended=None if ended is None else float(ended),
        hosts=tuple(json.loads(hosts)),
        world_size=int(size or 0),
        failure=failure,
        host_view=json.loads(view) if view else None,
        rendezvous_host=rendezvous if isinstance(rendezvous, str) else None,
    )
