"""`launch --validate`: the option's refusals (before any host is reached), the verdict
the quick validation hands the launch, and the service's step: a fail refuses the launch
with its reasons and the way to skip it, a warn is told and the launch goes on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from console.cli import main
from console.errors import PreflightError
from console.jobs.service import (
    VALIDATE_SKIP,
    JobService,
    LaunchEvent,
    ValidationProgress,
    ValidationVerdict,
    ValidationWarning,
)
from console.validate.preflight import verdict_of
from console.validate.verdicts import LinkRow, Row

HOSTS_YAML = """\
hosts:
  - name: n0
    address: 127.0.0.1
  - name: n1
    address: 127.0.0.2
slurm:
  login: n0
"""


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS_YAML)
    return path


def launch(hosts: Path, *extra: str) -> list[str]:
    return ["launch", str(hosts), "--kind", "ddp", *extra, "--", "train.py"]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (("--validate", "--scheduler", "slurm"), "applies to --scheduler ssh"),
        (("--validate", "--skip-preflight"), "--skip-preflight skips"),
    ],
)
def test_validate_is_refused_where_it_makes_no_sense(
    hosts: Path, extra: tuple[str, ...], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(launch(hosts, *extra)) == 2
    err = capsys.readouterr().err
    assert "--validate: " in err and said in err


def test_launch_help_lists_validate(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["launch", "--help"])
    assert "--validate" in capsys.readouterr().out


def test_verdict_of_names_what_is_not_ok() -> None:
    rows = [
        Row("n0", None, "ok", ()),
        Row("n1", None, "warn", ("CPU limited by a cgroup quota to 0.25 CPU",)),
        Row("n1", 0, "fail", ("bf16 matmul 10 TFLOPS",)),
    ]
    links = [LinkRow(("n0", "n1"), 0.01, "warn", ("slow link",))]
    verdict = verdict_of(rows, links)
    assert verdict.state == "fail"
    assert verdict.lines == (
        "n1: warn: CPU limited by a cgroup quota to 0.25 CPU",
        "n1 GPU 0: fail: bf16 matmul 10 TFLOPS",
        "link n0<->n1: warn: slow link",
    )
    assert verdict_of([Row("n0", None, "ok", ())], []) == ValidationVerdict("ok", ())
    # A link test that could not run fails, as `validate` exits 1 for it.
    assert verdict_of([Row("n0", None, "ok", ())], [], ["store timed out"]).state == "fail"


def checked(verdict: ValidationVerdict) -> tuple[Any, list[tuple[str, ...]]]:
    asked: list[tuple[str, ...]] = []

    async def check(names: tuple[str, ...], progress: Callable[[str], None]) -> ValidationVerdict:
        asked.append(names)
        progress("n0: compute")
        return verdict

    return check, asked


# Only the plan's hosts are read by the step: a plan with a launch per host and a spare.
PREPARED: Any = SimpleNamespace(
    plan=SimpleNamespace(
        launches=[SimpleNamespace(host="n0"), SimpleNamespace(host="n1")],
        hosts_involved=("n1", "n2"),
    )
)


def test_a_failed_validation_refuses_with_its_reasons_and_the_way_past() -> None:
    service = JobService(SimpleNamespace(scheduler="ssh"), {})
    check, asked = checked(ValidationVerdict("fail", ("n1: fail: memory copy 1 GB/s",)))
    events: list[LaunchEvent] = []
    with pytest.raises(PreflightError) as refused:
        asyncio.run(service.validate(PREPARED, check, events.append))
    assert asked == [("n0", "n1", "n2")]
    assert str(refused.value).splitlines() == [
        "validate --quick failed:",
        "n1: fail: memory copy 1 GB/s",
        VALIDATE_SKIP,
    ]
    assert "without --validate" in VALIDATE_SKIP
    assert events == [ValidationProgress("n0: compute")]


def test_a_warn_is_told_and_the_launch_goes_on() -> None:
    service = JobService(SimpleNamespace(scheduler="ssh"), {})
    check, _ = checked(ValidationVerdict("warn", ("n1: warn: slow",)))
    events: list[LaunchEvent] = []
    verdict = asyncio.run(service.validate(PREPARED, check, events.append))
    assert verdict.state == "warn"
    assert events == [ValidationProgress("n0: compute"), ValidationWarning("n1: warn: slow")]
