"""The failure summary's first error: the cause a rank printed, not the launcher's own
report that follows it (real torchrun and mpirun output, tests/data/launchers/)."""

from __future__ import annotations

from pathlib import Path

from console.jobs.ssh.failure_lines import failed_rank, first_error
from console.jobs.ssh.job import JobFailure

DATA = Path(__file__).resolve().parents[1] / "data" / "launchers"


def lines(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


def test_torchrun_missing_script_points_at_the_rank_not_childfailederror() -> None:
    found = first_error(lines("torchrun_missing_script.err"))
    assert found[0].startswith(("[default0]:", "[default1]:"))
    assert "can't open file '/tmp/nosuch_train.py'" in found[0]
    assert not any("ChildFailedError" in line or "elastic" in line for line in found)


def test_mpirun_points_at_the_first_rank_traceback_not_its_report() -> None:
    found = first_error(lines("mpirun_rank_raised.out"))
    assert found[0] == "[1,1]<stderr>:Traceback (most recent call last):"
    assert any("boom 42" in line for line in found)
    assert not any("Primary job" in line or line.startswith("-----") for line in found)


def test_without_an_error_line_the_last_words_before_the_report_are_the_cause() -> None:
    report = lines("torchrun_missing_script.err")[6:]  # torchrun's block alone
    said = ["[default1]:step 1", "", "[default1]:rank 1 giving up: loss is nan", *report]
    assert first_error(said, context=2) == (
        "[default1]:step 1",
        "[default1]:rank 1 giving up: loss is nan",
    )
    assert first_error(["step 1", "step 2"]) == ()  # no launcher report: the tail says it
    assert first_error(report) == ()


def test_the_summary_shows_the_cause_before_the_last_lines() -> None:
    out = lines("torchrun_missing_script.err")
    failure = JobFailure("node0", "torchrun-0", (0, 1), 1, "", tuple(out[-3:]), first_error(out))
    text = failure.describe()
    assert text.index("first error:") < text.index("can't open file") < text.index("last lines")


def test_mpirun_report_names_the_first_rank_that_failed() -> None:
    # Open MPI 4's "The first process to do so was: Process name: [[JOBID,STEP],RANK]".
    assert failed_rank(lines("mpirun_rank_raised.out")) == 1
    # Open MPI 5 (prterun) names processes by its own id; another rank, as the tail shows it.
    assert failed_rank(["  Process name: [prterun-node0-4242@1,3]", "  Exit code:    3"]) == 3
    assert failed_rank(["  Process name: [[41063,1],12]"]) == 12
    # No report, or a torchrun one: no rank named here.
    assert failed_rank(lines("torchrun_missing_script.err")) is None
    assert failed_rank(["rank 2 said: Process name unknown"]) is None
