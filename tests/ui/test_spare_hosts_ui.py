"""--spare-hosts in the console: the launch form's Spare hosts field (the CLI's checks,
each message on the field), the preview, and the jobs rows."""

from __future__ import annotations

import pytest
from test_launch_form import INVENTORY, make_app, open_form, set_field, text
from textual.widgets import Input

from console.errors import PlanError
from console.inventory import Host, Inventory
from console.jobs.plan.planner import plan
from console.ui.jobs_service import plan_preview
from console.ui.screens.launch import form_to_spec
from console.ui.screens.launch_fields import plan_problem
from tests.ui.test_restart_views import form

FOUR = Inventory(
    path="/srv/hosts.yaml",
    hosts=tuple(Host(name=f"node{i}", address=f"10.0.0.{10 + i}", gpus=1) for i in range(4)),
)
ELASTIC = {"min_hosts": "2", "max_restarts": "3"}


def test_the_form_takes_spare_hosts_as_the_cli_does() -> None:
    spec, errors = form_to_spec(form(spare_hosts="node3", **ELASTIC))
    assert errors == {} and spec is not None and spec.spare_hosts == ("node3",)
    spec, errors = form_to_spec(form(spare_hosts="node3, node4", **ELASTIC))
    assert spec is not None and spec.spare_hosts == ("node3", "node4")
    for raw, said in [
        ("node3,,node4", "empty name"),
        ("node3,node3", "listed twice"),
    ]:
        spec, errors = form_to_spec(form(spare_hosts=raw, **ELASTIC))
        assert spec is None and said in errors["spare_hosts"], (raw, errors)
    spec, errors = form_to_spec(form(kind="ps", program="example:ps", spare_hosts="node3"))
    assert spec is None and "ddp with --min-hosts" in errors["spare_hosts"]
    spec, errors = form_to_spec(form(spare_hosts="node3", min_hosts="2", max_restarts="0"))
    # Every field's error at once (issue 30): both fields are refused, each under itself.
    assert spec is None and set(errors) == {"min_hosts", "spare_hosts"}, errors
    spec, errors = form_to_spec(form(hosts=("node0", "node3"), spare_hosts="node3", **ELASTIC))
    assert spec is None and "already one of the job's" in errors["spare_hosts"]


def test_the_plan_puts_its_spare_problems_on_the_field_and_shows_the_spare() -> None:
    spec, _ = form_to_spec(form(spare_hosts="node3", max_restarts="1"))  # no --min-hosts
    assert spec is not None
    with pytest.raises(PlanError) as raised:
        plan(spec, FOUR, job_id="j-1")
    problem = plan_problem(raised.value)
    assert "needs --min-hosts" in problem["spare_hosts"], problem
    spec, _ = form_to_spec(form(spare_hosts="node3", **ELASTIC))
    assert spec is not None
    job = plan(spec, FOUR, job_id="j-1")
    preview = plan_preview(job)
    assert "spare hosts: node3" in preview
    assert "[node3] torchrun 3  (cwd ~/distconsole)  spare: waits to replace a lost host" in preview
    assert "[node2] torchrun 2  (cwd ~/distconsole)\n" in preview


async def test_a_bad_spare_shows_on_its_field_and_a_good_one_reaches_the_plan() -> None:
    app = make_app()
    assert len(INVENTORY.hosts) == 3  # node0, node1 (a100), node2 (t4)
    async with app.run_test(size=(160, 60)) as pilot:
        screen = await open_form(app, pilot)
        await set_field(pilot, screen, "max_restarts", "2")
        await set_field(pilot, screen, "min_hosts", "1")
        await set_field(pilot, screen, "spare_hosts", "node9")
        assert "no host named node9" in text(screen, "#error-spare_hosts")
        assert "Fix the fields marked in red" in text(screen, "#launch-status")
        await set_field(pilot, screen, "spare_hosts", "node2,node2")
        assert "listed twice" in text(screen, "#error-spare_hosts")
        await set_field(pilot, screen, "spare_hosts", "node2")
        assert text(screen, "#error-spare_hosts") == ""
        assert screen.spec is not None and screen.spec.spare_hosts == ("node2",)
        preview = text(screen, "#launch-preview")
        assert "spare hosts: node2" in preview and "[node2] torchrun 2" in preview
        assert "spare: waits to replace a lost host" in preview
        # Kept in the draft like every field: the next form opens with it.
        await pilot.press("escape")
        await pilot.pause()
        screen = await open_form(app, pilot)
        assert screen.query_one("#spare_hosts", Input).value == "node2"
