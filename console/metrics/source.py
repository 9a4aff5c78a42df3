"""The latest of everything the endpoint exports, written by the feeds, read by scrapes.

Writers run on the console's event loop; a scrape runs on the HTTP server's thread.
Each write replaces whole values under a lock and :meth:`MetricsSource.snapshot` copies
the three maps under it, so a scrape never sees a half-applied batch and never waits on
SSH: it reads what the samplers, the job sweeps and the log followers last delivered.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from console.jobs.report.slow_ranks import RankPace
from console.logs.steps import RankSteps
from console.probe.models import HostView


@dataclass(frozen=True, slots=True)
class JobFigures:
    """One job as exported: ``distconsole_job_state``, ``_job_restarts`` and their labels."""

    job_id: str
    name: str
    kind: str
    state: str
    restarts: int = 0  # --max-restarts: restarts done (the leader supervisor's count)
    pace: tuple[RankPace, ...] = ()  # every rank's latest window (the leader's, issue 32)


@dataclass(frozen=True, slots=True)
class Snapshot:
    views: tuple[HostView, ...]
    jobs: tuple[JobFigures, ...]
    ranks: Mapping[str, tuple[RankSteps, ...]]  # job id -> its ranks' progress
    taken: float


class MetricsSource:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._views: dict[str, HostView] = {}
        self._jobs: dict[str, JobFigures] = {}
        self._ranks: dict[str, tuple[RankSteps, ...]] = {}
        self.clock = clock

    def update_views(self, batch: Mapping[str, HostView]) -> None:
        """A ``ClusterMonitor`` batch: the hosts it names replace their views."""
        with self._lock:
            self._views.update(batch)

    def set_jobs(self, jobs: Iterable[JobFigures]) -> None:
        """Every job to export (a sweep's full list; jobs left out are dropped)."""
        fresh = {j.job_id: j for j in jobs}
        with self._lock:
            self._jobs = fresh
            for job_id in [j for j in self._ranks if j not in fresh]:
                del self._ranks[job_id]

    def set_ranks(self, job_id: str, ranks: Iterable[RankSteps]) -> None:
        """A job's per-rank progress (the step parser's ``StepTracker.ranks()``)."""
        progress = tuple(ranks)
        with self._lock:
            self._ranks[job_id] = progress

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(
                tuple(self._views.values()),
                tuple(self._jobs.values()),
                dict(self._ranks),
                self.clock(),
            )
