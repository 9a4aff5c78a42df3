"""The logs screen's panels: the steps table (steps, stalls, the job's progress, read
from the lines by a :class:`StepTracker`) and the summary line above the log."""

from __future__ import annotations

import re
from collections.abc import Sized
from typing import Protocol, TypeVar

from textual.widget import Widget

from console.jobs.models import JobPlan
from console.jobs.report.slow_ranks import slow_header
from console.logs.buffer import LogStore
from console.logs.curves import CurveStore
from console.logs.file_steps import STEP_HINTS
from console.logs.models import RankKey, rank_key
from console.logs.stalls import Stall, find_stalls
from console.logs.steps import JobProgress, StepTracker
from console.ui.services import Services
from console.ui.widgets.logs_summary import LogsSummary, summary_parts
from console.ui.widgets.steps_table import StepsTable, job_gpu_util

WidgetT = TypeVar("WidgetT", bound=Widget)


class LogsState(Protocol):
    """What the panels read of the logs screen (:class:`~console.ui.screens.logs.LogsScreen`),
    declared here so that the panels never import the screen that holds them."""

    services: Services
    plan: JobPlan
    store: LogStore
    following: bool
    ranks: list[RankKey] | None
    search: re.Pattern[str] | None
    matches: list[int]
    filter_mode: bool
    context_lines: int
    notes: list[str]

    def query_one(self, selector: str, expect_type: type[WidgetT]) -> WidgetT: ...
    def query(self, selector: str) -> Sized: ...


class LogsPanels:
    def __init__(self, screen: LogsState) -> None:
        self.screen = screen
        self.steps = StepTracker()
        self.curves = CurveStore()  # the curves screen's points (``c``)
        self.progress: JobProgress | None = None
        self.stalled: dict[RankKey, Stall] = {}

    def curves_from_start(self) -> CurveStore:
        """The curves from the job's first step: every step line the logs hold, fed one
        at a time as ``file_steps.py`` reads a whole file. Live, a point is kept per
        rank per refresh, so the backlog read when the screen opened (the job's first
        400 steps in one batch) gave a single point; from here on live points add on."""
        tracker = StepTracker()
        store = CurveStore()
        for line in self.screen.store.lines():
            lowered = line.text.lower()
            if not any(hint in lowered for hint in STEP_HINTS):
                continue
            tracker.feed([line])
            rank = tracker.rank(rank_key(line))
            if rank is not None:
                store.record([rank], line.received)
        store.record(self.steps.ranks(), self.screen.services.clock())
        self.curves = store
        return store

    def refresh_steps(self) -> None:
        screen = self.screen
        services, plan = screen.services, screen.plan
        ranks = self.steps.ranks()
        self.curves.record(ranks, services.clock())
        gpu_util = job_gpu_util(services.store.views.values(), plan.job_id)
        self.stalled = {s.key: s for s in find_stalls(ranks, services.clock(), gpu_util)}
        self.progress = self.steps.job(plan.total_steps)
        table = screen.query_one("#steps-table", StepsTable)
        if table.display:  # hidden (s): nothing to render; shown again, it is refreshed
            table.show(ranks, self.stalled)
        self.summary()

    def ended(self) -> str | None:
        """The job's final state once it has ended (the jobs store's row), else None."""
        screen = self.screen
        row = screen.services.store.jobs.get(screen.plan.job_id)
        return row.state.value if row is not None and row.state.finished else None

    def restarts(self) -> int:
        """The job's restarts so far (--max-restarts), from the jobs store's row."""
        screen = self.screen
        row = screen.services.store.jobs.get(screen.plan.job_id)
        return row.restarts if row is not None else 0

    def membership(self) -> str:
        """``2 of 3 hosts`` once a scale-down took hosts out (--min-hosts), else ``""``."""
        screen = self.screen
        row = screen.services.store.jobs.get(screen.plan.job_id)
        return row.membership if row is not None else ""

    def slow(self) -> str:
        """The slow ranks' mark (the leader's score, via the jobs store's row), else ``""``."""
        screen = self.screen
        row = screen.services.store.jobs.get(screen.plan.job_id)
        return slow_header(list(row.slow_ranks)) if row is not None else ""

    def summary(self) -> None:
        screen = self.screen
        if not screen.query("#logs-summary"):
            return
        parts = summary_parts(
            job_id=screen.plan.job_id,
            received=screen.store.total_received,
            following=screen.following,
            progress=self.progress,
            split_total=screen.plan.total_steps is not None,
            stalled=self.stalled,
            ranks=screen.ranks,
            search=screen.search,
            matches=len(screen.matches),
            filter_context=screen.context_lines if screen.filter_mode else None,
            note=screen.notes[-1] if screen.notes else None,
            ended=self.ended(),
            restarts=self.restarts(),
            membership=self.membership(),
            slow=self.slow(),
        )
        screen.query_one("#logs-summary", LogsSummary).say(parts)
