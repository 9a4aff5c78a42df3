"""Steps read back from whole log files (a report's bundle): every step line of every
rank, through the same attribution and step parser as live logs, into a CurveStore.

Live, the logs screen keeps a point per rank each time the parser's step moved; here
each line that could hold a step (one holding a step pattern's hint) is fed on its own,
so every printed step becomes a point. The files carry no times: a point's time is
None (steps.csv leaves it empty), and steps/s is the one the trainer printed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from console.jobs.models import JobPlan
from console.jobs.private import write_private
from console.logs.curves import CurvePoint, CurveStore, steps_csv
from console.logs.follower import FollowTarget
from console.logs.models import LineRuns, RankKey
from console.logs.prefixes import FileAttribution
from console.logs.steps import StepTracker
from console.logs.targets import targets_from_plan

STEP_HINTS = ("step", "iter", "epoch", "%|")  # every default step pattern holds one

FileReader = Callable[[str, str], str | None]  # (host, path on it) -> its text, or None


def steps_of_files(targets: Iterable[FollowTarget], read: FileReader) -> CurveStore:
    store = CurveStore(max_points=1_000_000)  # a file's every step: bounded by the files
    tracker = StepTracker()
    for target in targets:
        for ctx in target.files:
            text = read(target.host, ctx.path)
            if not text:
                continue
            lines = LineRuns(FileAttribution(ctx).runs(text, 0.0))
            for line in lines:
                lowered = line.text.lower()
                if any(hint in lowered for hint in STEP_HINTS):
                    tracker.feed([line])
                    store.record(tracker.ranks(), now=0.0, timed=False)
    return store


def effective_training(curves: Mapping[RankKey, Sequence[CurvePoint]], wall_s: float) -> str:
    """``effective training time: 41% (12.3 s of steps advanced in 30.0 s)``: the time
    the first rank's steps took (the trainer's steps/s), each step once (one redone
    after a restart or a scale-down counts once: its last run), over the job's wall
    time; ``""`` without steps/s figures."""
    ranks = [points for points in curves.values() if any(p.rate for p in points)]
    if not ranks or wall_s <= 0:
        return ""
    last: dict[int, float] = {}
    for point in ranks[0]:
        if point.rate:
            last[point.step] = 1.0 / point.rate
    spent = sum(last.values())
    return (
        f"effective training time: {min(spent / wall_s, 1.0):.0%} "
        f"({spent:.1f} s of steps advanced in {wall_s:.1f} s)"
    )


def write_bundle_steps(plan: JobPlan, out: Path, wall_s: float | None = None) -> Path:
    """``steps.csv`` (time, rank, step, loss, rate) in a report bundle, from the rank
    logs it holds under ``hosts/HOST/`` (each host's job directory, relative). With the
    job's wall time, summary.txt gains its effective training time."""

    def read(host: str, path: str) -> str | None:
        job_dir = plan.job_dirs.get(host, "").rstrip("/")
        if not job_dir or not path.startswith(job_dir + "/"):
            return None
        try:
            return (out / "hosts" / host / path[len(job_dir) + 1 :]).read_text(errors="replace")
        except OSError:
            return None

    target = out / "steps.csv"
    curves = steps_of_files(targets_from_plan(plan), read).curves()
    write_private(target, steps_csv(curves))
    line = effective_training(curves, wall_s) if wall_s is not None else ""
    summary = out / "summary.txt"
    if line and summary.exists():
        with summary.open("a") as handle:
            handle.write(line + "\n")
    return target
