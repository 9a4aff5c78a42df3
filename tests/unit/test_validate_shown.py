"""Where a host's last validation is shown besides `health`: a job report's summary (one
line over the job's hosts, read by the caller: console.validate sits above jobs) and the
launch form's words for a failed `--validate`."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.inventory import Host, Inventory
from console.jobs.history import JobRecord
from console.jobs.models import JobState
from console.jobs.plan.planner import plan
from console.jobs.report.bundle import summary_lines
from console.jobs.service import VALIDATE_SKIP
from console.jobs.spec import make_spec
from console.ui.screens.launch_fields import PREFLIGHT_BOX, VALIDATE_BOX, preflight_refusal
from console.validate import store
from console.validate.verdicts import Row

NOW = 1.7e9


def record() -> JobRecord:
    inventory = Inventory(
        path="hosts.yaml",
        hosts=(Host(name="n0", address="10.0.0.1"), Host(name="n1", address="10.0.0.2")),
    )
    planned = plan(make_spec(kind="ddp", program="train.py"), inventory, job_id="job-1")
    return JobRecord(
        id="job-1", name="train", kind=planned.kind, state=JobState.SUCCEEDED, started=1.0e9,
        ended=1.0e9 + 30, hosts=("n0", "n1"), inventory="hosts.yaml", fail_fast=True,
        plan=planned, failure=None,
    )  # fmt: skip


def test_the_summary_names_each_hosts_last_validation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISTCONSOLE_DATA_DIR", str(tmp_path))
    inventory = str(tmp_path / "hosts.yaml")
    store.save(inventory, [Row("n0", None, "ok", ()), Row("n0", 0, "warn", ("slow",))], now=NOW)
    validated = store.validated_texts(inventory, now=NOW + 2 * 3600)
    assert validated == {"n0": "validated 2 h ago: warn"}
    lines = summary_lines(record(), None, validated)
    assert "last validation: n0 validated 2 h ago: warn; n1 not validated" in lines
    # A caller that read nothing (Slurm's report) adds no line.
    assert not [ln for ln in summary_lines(record()) if ln.startswith("last validation")]


def test_the_form_says_untick_the_validate_box_for_a_failed_validation() -> None:
    message = "\n".join(["validate --quick failed:", "n1: fail: memory copy 1 GB/s", VALIDATE_SKIP])
    said = preflight_refusal(message)
    assert "without --validate" not in said
    assert said.splitlines() == [
        "Not launched: validate --quick failed:",
        "n1: fail: memory copy 1 GB/s",
        f'fix the above, or untick "{VALIDATE_BOX}" to launch without it',
    ]
    # Any other pre-flight failure still points at the pre-flight box.
    assert PREFLIGHT_BOX in preflight_refusal("pre-flight failed:\nFAIL n0: no python")
