"""--hang-timeout / --stop-on-hang: the spec's checks, the CLI naming its options, and
what `plan` shows (a real subprocess on a real hosts.yaml)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from console.errors import JobSpecError
from console.inventory import Host, Inventory
from console.jobs.plan.planner import plan as make_plan
from console.jobs.plan_json import plan_from_json, plan_to_json
from console.jobs.spec import DEFAULT_HANG_TIMEOUT, make_spec

HOSTS_YAML = """\
hosts:
  - name: n0
    address: 10.0.0.1
    gpus: 2
"""


@pytest.mark.parametrize(
    ("given", "read"),
    [("20", 20.0), (1.5, 1.5), ("off", None), ("OFF", None), ("0", None), (0, None), (None, None)],
)
def test_hang_timeout_values(given: object, read: float | None) -> None:
    assert make_spec(kind="ddp", program="t.py", hang_timeout=given).hang_timeout == read


def test_hang_detection_is_on_by_default_well_under_nccls_ten_minutes() -> None:
    spec = make_spec(kind="ddp", program="t.py")
    assert spec.hang_timeout == DEFAULT_HANG_TIMEOUT and 0 < DEFAULT_HANG_TIMEOUT < 600
    assert spec.stop_on_hang is False


@pytest.mark.parametrize(
    ("given", "says"),
    [("-3", "above 0"), ("inf", "above 0"), ("nan", "above 0"), ("soon", "must be a number")],
)
def test_bad_hang_timeouts_name_the_field(given: str, says: str) -> None:
    with pytest.raises(JobSpecError) as caught:
        make_spec(kind="ddp", program="t.py", hang_timeout=given)
    assert caught.value.field == "hang_timeout" and says in str(caught.value)


def test_stop_on_hang_needs_hang_detection() -> None:
    with pytest.raises(JobSpecError) as caught:
        make_spec(kind="ddp", program="t.py", hang_timeout="off", stop_on_hang=True)
    assert caught.value.field == "stop_on_hang"


def plan(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS_YAML)
    return subprocess.run(
        [sys.executable, "-m", "console.cli", "plan", str(hosts), "--kind", "ddp",
         *options, "--", "train.py"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_cli_errors_name_the_option(tmp_path: Path) -> None:
    bad = plan(tmp_path, "--hang-timeout", "soon")
    assert bad.returncode == 2 and "--hang-timeout: must be a number" in bad.stderr
    stop = plan(tmp_path, "--hang-timeout", "off", "--stop-on-hang")
    assert stop.returncode == 2 and "--stop-on-hang: needs hang detection" in stop.stderr


def test_plan_shows_the_hang_check(tmp_path: Path) -> None:
    shown = plan(tmp_path, "--hang-timeout", "20", "--stop-on-hang")
    assert shown.returncode == 0, shown.stderr
    assert "hang check: hung after 20 s without a new log line" in shown.stdout
    assert "then stop the job" in shown.stdout
    data = json.loads(plan(tmp_path, "--hang-timeout", "20", "--json").stdout)
    assert (data["hang_timeout"], data["stop_on_hang"]) == (20.0, False)
    assert data["launches"][0]["env"]["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    off = plan(tmp_path, "--hang-timeout", "0")
    assert "hang check: off" in off.stdout and "DISTCONSOLE_HANG_HOOK" not in off.stdout


def test_hang_settings_survive_the_history_and_job_json() -> None:
    inventory = Inventory(path="h.yaml", hosts=(Host(name="n0", address="10.0.0.1", gpus=2),))
    spec = make_spec(kind="ddp", program="t.py", hang_timeout="20", stop_on_hang=True)
    planned = make_plan(spec, inventory, job_id="ddp-t-20260101-000000-abcdef")
    again = plan_from_json(plan_to_json(planned))
    assert again == planned and (again.hang_timeout, again.stop_on_hang) == (20.0, True)
    assert again.uploads[-1].package == "console.hostprogs.supervisor"
