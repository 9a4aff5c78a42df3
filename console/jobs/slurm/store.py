"""What the history needs to know about a Slurm job beyond its plan: the Slurm job id,
the login host it was submitted on, the batch script, and Slurm's last word on it.

A table of its own (``slurm_jobs``) in the job history's SQLite file: the ``jobs`` row
(plan, state, failure) is written by the same code for every backend; this row says
that the job is Slurm's and how to ask Slurm about it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

from console.errors import JobError

SCHEMA = """
CREATE TABLE IF NOT EXISTS slurm_jobs (
    id TEXT PRIMARY KEY,
    slurm_id TEXT NOT NULL,
    login TEXT NOT NULL,
    script TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT ''
);
"""


@dataclass(frozen=True, slots=True)
class SlurmRecord:
    id: str  # the console's job id
    slurm_id: str
    login: str
    script: str
    detail: str  # e.g. "slurm 12 PENDING (Resources)"


class SlurmStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            with self._db() as db:
                db.executescript(SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise JobError(f"job history {self.path}: {exc}") from exc

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path, timeout=10.0)) as db, db:
            yield db

    def add(self, record: SlurmRecord) -> None:
        with self._db() as db:
            db.execute(
                "INSERT INTO slurm_jobs (id, slurm_id, login, script, detail)"
                " VALUES (?, ?, ?, ?, ?)",
                (record.id, record.slurm_id, record.login, record.script, record.detail),
            )

    def set_detail(self, job_id: str, detail: str) -> None:
        with self._db() as db:
            db.execute("UPDATE slurm_jobs SET detail = ? WHERE id = ?", (detail, job_id))

    def find(self, job_id: str) -> SlurmRecord | None:
        """The job's Slurm row, or None when it is not a Slurm job."""
        with self._db() as db:
            row = db.execute(
                "SELECT id, slurm_id, login, script, detail FROM slurm_jobs WHERE id = ?",
                (job_id,),
            ).fetchone()
        return None if row is None else SlurmRecord(*row)

    def all(self) -> dict[str, SlurmRecord]:
        with self._db() as db:
            rows = db.execute("SELECT id, slurm_id, login, script, detail FROM slurm_jobs")
            return {row[0]: SlurmRecord(*row) for row in rows.fetchall()}
