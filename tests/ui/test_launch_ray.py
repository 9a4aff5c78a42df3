"""The launch form's ray kind, with Pilot: choosing "ray" shows the Ray fields (object
store, dashboard host and port) and the bundled Ray example, the preview shows the head's
``ray start --head`` with the ports and the dashboard's address, the other hosts' ``ray
start --address``, and a bad value is refused under the field it concerns. No hosts: the
preview is the real planner (jobs/plan/ray.py)."""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot
from textual.widgets import Input, Select, Static
from ui_fixtures import FROZEN_NOW

from console.inventory import Host, Inventory
from console.ui.app import DistConsoleApp
from console.ui.screens.launch import RAY_ONLY, LaunchScreen

INVENTORY = Inventory(
    path="/srv/ray/hosts.yaml",
    hosts=(
        Host(name="node0", address="10.0.0.10", gpus=2),
        Host(name="node1", address="10.0.0.11", gpus=2),
    ),
)


def make_app() -> DistConsoleApp:
    return DistConsoleApp(INVENTORY, connections_factory=None, clock=lambda: FROZEN_NOW)


async def open_form(pilot: Pilot[Any], app: DistConsoleApp) -> LaunchScreen:
    await pilot.press("l")
    await pilot.pause()
    assert isinstance(app.screen, LaunchScreen)
    return app.screen


async def set_field(pilot: Pilot[Any], screen: LaunchScreen, name: str, value: str) -> None:
    screen.query_one(f"#{name}", Input).value = value
    await pilot.pause()


def shown(screen: LaunchScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


def ray_fields_shown(screen: LaunchScreen) -> list[bool]:
    return [bool(screen.query_one(f"#{name}", Input).display) for name in RAY_ONLY]


async def test_ray_kind_shows_its_fields_and_the_preview_its_head_and_dashboard() -> None:
    app = make_app()
    async with app.run_test(size=(200, 80)) as pilot:
        screen = await open_form(pilot, app)
        assert ray_fields_shown(screen) == [False, False, False]
        screen.query_one("#kind", Select).value = "ray"
        await pilot.pause()
        assert ray_fields_shown(screen) == [True, True, True]
        assert screen.query_one("#program", Input).value == "example:ray"
        await set_field(pilot, screen, "master_port", "29400")
        preview = shown(screen, "#launch-preview")
        assert screen.spec is not None, screen.errors
        # Defaults: the dashboard on the head only, port = master port + 1.
        assert "warning: Ray dashboard: http://127.0.0.1:29401 (on node0)" in preview
        head = next(line for line in preview.splitlines() if "--head" in line)
        assert " start --block --head --port 29400 --dashboard-host 127.0.0.1 " in head
        assert "--dashboard-port 29401 --ray-client-server-port 29402" in head
        assert "--num-gpus 2" in head and "--object-store-memory" not in head
        assert any(" start --block --address 10.0.0.10:29400 " in ln for ln in preview.splitlines())

        await set_field(pilot, screen, "ray_object_store", "2G")
        await set_field(pilot, screen, "ray_dashboard_host", "0.0.0.0")
        await set_field(pilot, screen, "ray_dashboard_port", "8265")
        preview = shown(screen, "#launch-preview")
        assert screen.spec is not None, screen.errors
        # Listening everywhere: the address to open is the head's own.
        assert "warning: Ray dashboard: http://10.0.0.10:8265 (on node0)" in preview
        head = next(line for line in preview.splitlines() if "--head" in line)
        assert "--dashboard-host 0.0.0.0 --dashboard-port 8265 " in head
        assert "--object-store-memory 2000000000 " in head  # sizes are decimal (parse_size)


async def test_bad_ray_values_are_refused_under_their_fields() -> None:
    app = make_app()
    async with app.run_test(size=(200, 80)) as pilot:
        screen = await open_form(pilot, app)
        screen.query_one("#kind", Select).value = "ray"
        await pilot.pause()
        await set_field(pilot, screen, "master_port", "29400")
        cases = (
            ("ray_object_store", "10M", "Ray needs an object store of at least 79M"),
            ("ray_dashboard_host", "every host", "is not an address to listen on"),
            ("ray_dashboard_port", "29402", "29402 is one of the job's Ray ports 29400..29404"),
        )
        for name, bad, message in cases:
            await set_field(pilot, screen, name, bad)
            assert message in shown(screen, f"#error-{name}"), screen.errors
            assert screen.spec is None
            assert "(the preview appears once the form is valid)" in shown(
                screen, "#launch-preview"
            )
            await set_field(pilot, screen, name, "")
            assert shown(screen, f"#error-{name}") == ""
        # Another kind hides the Ray fields, and their values no longer count.
        await set_field(pilot, screen, "ray_object_store", "10M")
        screen.query_one("#kind", Select).value = "ddp"
        await pilot.pause()
        assert ray_fields_shown(screen) == [False, False, False]
        assert screen.spec is not None, screen.errors
        assert "ray start" not in shown(screen, "#launch-preview")
