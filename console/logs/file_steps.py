"""Steps read back from whole log files (a report's bundle): every step line of every
rank, through the same attribution and step parser as live logs, into a CurveStore.

Live, the logs screen keeps a point per rank each time the parser's step moved; here
each line that could hold a step (one holding a step pattern's hint) is fed on its own,
so every printed step becomes a point. The files carry no times: a point's time is
None (steps.csv leaves it empty), and steps/s is the one the trainer printed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from console.jobs.models import JobPlan
from console.jobs.private import write_private
from console.logs.curves import CurveStore, steps_csv
from console.logs.follower import FollowTarget
from console.logs.models import LineRuns
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


def write_bundle_steps(plan: JobPlan, out: Path) -> Path:
    """``steps.csv`` (time, rank, step, loss, rate) in a report bundle, from the rank
    logs it holds under ``hosts/HOST/`` (each host's job directory, relative)."""

    def read(host: str, path: str) -> str | None:
        job_dir = plan.job_dirs.get(host, "").rstrip("/")
        if not job_dir or not path.startswith(job_dir + "/"):
            return None
        try:
            return (out / "hosts" / host / path[len(job_dir) + 1 :]).read_text(errors="replace")
        except OSError:
            return None

    target = out / "steps.csv"
    write_private(target, steps_csv(steps_of_files(targets_from_plan(plan), read).curves()))
    return target
