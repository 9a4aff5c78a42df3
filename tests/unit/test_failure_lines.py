"""The failure summary's first error: the cause a rank printed, not the launcher's own
report that follows it (real torchrun and mpirun output, tests/data/launchers/)."""

from __future__ import annotations

from pathlib import Path

from console.jobs.ssh.failure_lines import CONTEXT_LINES, failed_rank, failure_cause, first_error
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
    # torchrun's report names its root cause's rank.
    assert failed_rank(lines("torchrun_missing_script.err")) == 0
    # No report: no rank named.
    assert failed_rank(["rank 2 said: Process name unknown"]) is None


def test_torchrun_root_cause_names_the_rank_not_the_first_traceback() -> None:
    """Rank 0 exits 3; rank 1's traceback (its peer gone) reaches the log first. torchrun's
    report names rank 0 as the root cause: the cause shown is rank 0, how it ended and
    when, its own last lines, then rank 1 as a consequence."""
    said = lines("torchrun_root_cause.out")
    told = failure_cause(said)
    assert told[0] == "root cause: rank 0 on localhost: exit status 3 at 2026-11-26_12:41:14"
    assert "[default0]:CRASHING rank=0 step=20" in told
    assert not any(line.startswith("[default1]:") for line in told)
    assert told[-1] == "then rank 1: exit status 1"
    assert failed_rank(said) == 0
    assert failed_rank(list(told)) == 0  # as the console reads a supervisor's cause back


def test_the_root_cause_names_the_inventory_host_whose_output_it_is() -> None:
    """torchrun's report says "localhost" (or the machine's name, which hosts may share):
    a caller that knows whose output it read names that host instead."""
    told = failure_cause(lines("torchrun_root_cause.out"), host="node1")
    assert told[0] == "root cause: rank 0 on node1: exit status 3 at 2026-11-26_12:41:14"
    assert failed_rank(list(told)) == 0


def test_a_signalled_consequence_reads_as_killed_by() -> None:
    said = [
        ln.replace("exitcode  : 1 (pid: 31251)", "exitcode  : -15 (pid: 31251)")
        for ln in lines("torchrun_root_cause.out")
    ]
    assert failure_cause(said)[-1] == "then rank 1: killed by SIGTERM"


def test_a_traceback_is_shown_to_its_message() -> None:
    """Rank 1's traceback is 19 lines; it is shown to the exception's message, not cut
    after CONTEXT_LINES lines."""
    found = first_error(lines("torchrun_root_cause.out"))
    assert found[0] == "[default1]:Traceback (most recent call last):"
    assert found[-1] == (
        "[default1]:RuntimeError: allreduce failed: connection reset by peer (rank 0 is gone)"
    )
    assert len(found) > CONTEXT_LINES + 1


def test_the_summary_tells_a_root_cause_without_a_first_error_heading() -> None:
    told = failure_cause(lines("torchrun_root_cause.out"))
    text = JobFailure("node0", "torchrun-0", (0,), 1, "", ("tail",), told).describe()
    assert text.splitlines()[:2] == [
        "node0 torchrun-0 (rank 0) failed: exit status 1",
        "root cause: rank 0 on localhost: exit status 3 at 2026-11-26_12:41:14",
    ]
    assert "first error:" not in text
