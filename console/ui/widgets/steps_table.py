"""The logs screen's steps panel: one row per rank (step, rates, loss, lag, stalled)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from console.logs.models import RankKey, rank_label
from console.logs.steps import JobProgress, RankSteps
from console.probe.models import HostView
from console.ui.formatting import plain

STEP_COLUMNS = ("Rank", "Host", "Step", "Steps/s", "Samples/s", "Loss", "Lag", "")


def steps_reading(progress: JobProgress, *, split_total: bool) -> str:
    """The job's steps, with the total next to the counter it belongs to: a total split
    over the ranks (Horovod) is reached by the sum of their counters; a total the ranks
    print themselves ("step 7/300", DDP) is every rank's own, so rank 0's."""
    total = f"/{progress.total_steps}" if progress.total_steps else ""
    rank0 = None if progress.rank0_step is None else f"rank 0 {progress.rank0_step}"
    if split_total:
        return f"steps: sum {progress.sum_steps}{total}" + (f" · {rank0}" if rank0 else "")
    if rank0 is None:
        return f"steps: sum {progress.sum_steps}"
    return f"steps: {rank0}{total} · sum {progress.sum_steps}"


def job_gpu_util(views: Iterable[HostView], job_id: str) -> dict[RankKey, float]:
    """GPU utilization per rank of a job, from the latest samples (for the stall check)."""
    util: dict[RankKey, float] = {}
    for view in views:
        for gpu in view.sample.gpus if view.sample else ():
            for p in gpu.processes:
                if p.job == job_id and p.rank is not None and gpu.utilization_gpu is not None:
                    util[p.rank] = gpu.utilization_gpu
    return util


def _fig(value: Any, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _cells(r: RankSteps, furthest: int, stalled: bool) -> tuple[str, ...]:
    """One row as plain strings: compared with what the row shows before any cell (a
    rich Text) is made, so a refresh costs string formatting for rows that stayed."""
    lag = furthest - r.step if r.step is not None else None
    return (
        rank_label(r.key), r.host, "" if r.step is None else str(r.step),
        _fig(r.steps_per_s, 2), _fig(r.samples_per_s), _fig(r.loss, 4),
        "" if lag is None else str(lag),  # 0 is a reading: in step with the furthest
        "stalled" if stalled else "",
    )  # fmt: skip


def _cell(column: int, value: str) -> Text:
    if column == len(STEP_COLUMNS) - 1 and value:
        return Text(value, style="bold red")
    return plain(value)


class StepsTable(DataTable[Text]):
    """Rows keyed by rank label; ``show`` rewrites only the cells that changed.

    The screen calls ``show`` at its refresh interval (1 s by default), never per batch
    of lines: each changed cell makes the table render its visible rows again."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="none")
        self.add_columns(*STEP_COLUMNS)
        self._cells: dict[str, tuple[str, ...]] = {}  # what each row shows

    def show(self, ranks: Sequence[RankSteps], stalled: Collection[RankKey]) -> None:
        furthest = max((r.step or 0 for r in ranks), default=0)
        rows = [_cells(r, furthest, r.key in stalled) for r in ranks]
        labels = [row[0] for row in rows]
        if labels != list(self._cells):
            # Ranks came or went: rebuild. Otherwise only changed cells are updated, so
            # the table neither re-measures nor re-renders rows that stayed the same.
            self.clear()
            for label, row in zip(labels, rows, strict=True):
                self.add_row(*(_cell(i, v) for i, v in enumerate(row)), key=label)
        else:
            columns = list(self.columns)
            for label, row in zip(labels, rows, strict=True):
                old = self._cells[label]
                if row == old:
                    continue
                for i, (column, cell, before) in enumerate(zip(columns, row, old, strict=True)):
                    if cell != before:
                        self.update_cell(label, column, _cell(i, cell))
        self._cells = dict(zip(labels, rows, strict=True))
