"""Issue 30 (5): the launch form. The ps preview counts workers (not "per GPU" over every
task); every field's error shows at once; the notify fields (the CLI's --notify,
--notify-command, --notify-on and their checks); an unclosed quote names its field and
what to do; a failed pre-flight gives the form's advice, not the command line's. Pilot
on the real app; the plan is the real planner's; the pre-flight runs on demo hosts."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Input, Select, Static
from ui_fixtures import FROZEN_NOW

from console import inventory as inventory_module
from console.inventory import Host, Inventory
from console.settings import make_settings
from console.transport.demo import DemoCluster
from console.ui.app import DistConsoleApp
from console.ui.screens.launch import LaunchScreen

INVENTORY = Inventory(
    path="/srv/hosts.yaml",
    hosts=tuple(Host(name=f"node{i}", address=f"10.0.0.1{i}", gpus=4) for i in range(3)),
)


async def open_form(app: DistConsoleApp, pilot: Pilot[Any]) -> LaunchScreen:
    await pilot.press("l")
    await pilot.pause()
    assert isinstance(app.screen, LaunchScreen)
    return app.screen


async def put(pilot: Pilot[Any], screen: LaunchScreen, **values: str) -> None:
    for name, value in values.items():
        screen.query_one(f"#{name}", Input).value = value
    await pilot.pause()


def text(screen: LaunchScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


async def test_ps_preview_counts_the_workers_that_run_the_steps() -> None:
    app = DistConsoleApp(INVENTORY, connections_factory=None, clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(160, 60)) as pilot:
        screen = await open_form(app, pilot)
        screen.query_one("#kind", Select).value = "ps"
        await pilot.pause()
        await put(pilot, screen, ps="1", workers="4", total_steps="40")
        preview = text(screen, "#launch-preview")
        steps = next(ln for ln in preview.splitlines() if ln.startswith("steps:"))
        # 5 tasks, 4 of them workers: 10 steps each, 40 in all (not "per GPU 10 global 50").
        assert (
            steps
            == "steps: total 40  per worker 10  global 40 (4 workers)  dropped by the division 0"
        )
        assert text(screen, "#hint-total_steps").startswith(
            "40 over 4 workers: 10 steps per worker"
        )


async def test_every_fields_error_shows_at_once_and_notify_is_checked() -> None:
    app = DistConsoleApp(INVENTORY, connections_factory=None, clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(160, 80)) as pilot:
        screen = await open_form(app, pilot)
        await put(
            pilot, screen, gpus_per_host="0", master_port="80", notify="not-a-url",
            notify_on="failed,bogus", args='--name "unclosed',
        )  # fmt: skip
        errors = {
            name: text(screen, f"#error-{name}")
            for name in ("gpus_per_host", "master_port", "notify", "notify_on", "args")
        }
        assert all(errors.values()), errors
        assert "between 1 and" in errors["gpus_per_host"]
        assert "between 1024 and 65535" in errors["master_port"]
        assert "bogus" in errors["notify_on"]
        assert errors["args"].startswith("Arguments: a quote is not closed; close it")
        assert "No closing quotation" not in errors["args"]
        await put(
            pilot, screen, gpus_per_host="2", master_port="", args="--lr 0.1",
            notify="https://hooks.example.com/T0", notify_on="failed,restarted",
            notify_command="mail -s done me",
        )  # fmt: skip
        assert screen.errors == {}, screen.errors
        assert screen.spec is not None
        assert screen.spec.notify == ("https://hooks.example.com/T0",)
        assert screen.spec.notify_on == ("failed", "restarted")
        assert screen.spec.notify_command == "mail -s done me"


async def until(pilot: Pilot[Any], check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        await pilot.pause(0.3)
    raise AssertionError(f"not within {timeout}s: {what}")


async def test_a_failed_preflight_gives_the_forms_advice() -> None:
    async with DemoCluster(1) as cluster:
        inventory = inventory_module.load(cluster.inventory_path)
        app = DistConsoleApp(inventory, settings=make_settings(monitor_interval_s=None))
        async with app.run_test(size=(160, 60)) as pilot:
            await until(pilot, lambda: app.services.jobs is not None, 60, "job control ready")
            screen = await open_form(app, pilot)
            await put(pilot, screen, program="/no/such/train.py", gpus_per_host="1")
            await pilot.press("ctrl+r")
            status = screen.query_one("#launch-status", Static)
            await until(
                pilot, lambda: "pre-flight failed" in str(status.render()), 90, "pre-flight"
            )
            said = str(status.render())
            assert "--skip-preflight" not in said, said
            assert 'untick "Run the pre-flight checks before starting"' in said, said
