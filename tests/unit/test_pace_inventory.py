"""hosts.yaml's ``slow_threshold`` (issue 32): the job's ``--slow-threshold`` when it names
none, from its leader host (usually set in ``defaults``), checked at load in the option's
range with a message naming the key and its line; and the launch form's field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from console.errors import InventoryError
from console.inventory import load
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.jobs.ssh.supervision import supervisor_spec


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def test_the_leader_hosts_threshold_is_the_jobs_default_and_the_option_wins(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        """
        defaults:
          slow_threshold: 1.6
        hosts:
          - {name: node0, address: 10.0.0.10, gpus: 1}
          - {name: node1, address: 10.0.0.11, gpus: 1, slow_threshold: 3}
        """,
    )
    inventory = load(path)
    assert [h.slow_threshold for h in inventory.hosts] == [1.6, 3.0]
    planned = plan(make_spec(kind="ddp", program="t.py"), inventory, job_id="j-1")
    assert planned.slow_threshold == 1.6
    cfg = supervisor_spec(
        planned, "node1", leader=inventory.hosts[0], leader_port=1, secret="k", grace_s=5
    )["config"]
    assert cfg["pace"] == {"threshold": 1.6}
    # node1 leads: its own value.
    led = plan(make_spec(kind="ps", program="t.py", hosts=("node1",)), inventory, job_id="j-2")
    assert led.slow_threshold == 3.0
    spec = make_spec(kind="ddp", program="t.py", slow_threshold=2.5)
    assert plan(spec, inventory, job_id="j-3").slow_threshold == 2.5
    plain = load(write(tmp_path, "hosts:\n  - {name: node0, address: 10.0.0.10}\n"))
    assert plan(make_spec(kind="ddp", program="t.py"), plain, job_id="j-4").slow_threshold is None


@pytest.mark.parametrize(
    ("value", "said"),
    [("1.0", "got 1.0"), ("11", "got 11"), ("fast", "got 'fast'"), ("true", "got True")],
)
def test_a_threshold_out_of_range_is_refused_naming_the_key_and_line(
    tmp_path: Path, value: str, said: str
) -> None:
    path = write(
        tmp_path,
        f"""
        defaults:
          user: alice
          slow_threshold: {value}
        hosts:
          - {{name: node0, address: 10.0.0.10}}
        """,
    )
    with pytest.raises(InventoryError) as info:
        load(path)
    text = str(info.value)
    assert "hosts.yaml:3: " in text and "slow_threshold" in text, text
    assert "1.05..10" in text and said in text, text


def test_the_launch_forms_field_reaches_the_spec_and_shows_its_problem() -> None:
    from console.ui.screens.launch_fields import LABELS, form_to_spec

    assert LABELS["slow_threshold"] == "Slow threshold"
    base = {"kind": "ps", "hosts": ["node0"], "program": "t.py"}
    spec, errors = form_to_spec({**base, "slow_threshold": " 1.8 "})
    assert errors == {} and spec is not None and spec.slow_threshold == 1.8
    spec, errors = form_to_spec({**base, "slow_threshold": "20"})
    assert spec is None and "1.05..10" in errors["slow_threshold"]
