"""The launch form with Pilot: inline validation naming fields, the live preview.

These need no hosts: the planner is pure, so the preview is the real plan.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Input, Select, Static
from ui_fixtures import FROZEN_NOW

from console.inventory import Host, Inventory
from console.jobs.sync.push import TREE_ID_PLACEHOLDER
from console.ui.app import DistConsoleApp
from console.ui.screens.launch import LaunchScreen, form_to_spec

INVENTORY = Inventory(
    path="/srv/hosts.yaml",
    hosts=(
        Host(name="node0", address="10.0.0.10", gpus=4, tags=("a100",)),
        Host(name="node1", address="10.0.0.11", gpus=4, tags=("a100",)),
        Host(name="node2", address="10.0.0.12", gpus=2, tags=("t4",)),
    ),
)


def make_app() -> DistConsoleApp:
    return DistConsoleApp(INVENTORY, connections_factory=None, clock=lambda: FROZEN_NOW)


async def open_form(app: DistConsoleApp, pilot: Pilot[Any]) -> LaunchScreen:
    await pilot.press("l")
    await pilot.pause()
    assert isinstance(app.screen, LaunchScreen)
    return app.screen


async def set_field(pilot: Pilot[Any], screen: LaunchScreen, name: str, value: str) -> None:
    box = screen.query_one(f"#{name}", Input)
    box.focus()
    box.value = ""
    await pilot.press(*value) if value else None
    await pilot.pause()


async def put_field(pilot: Pilot[Any], screen: LaunchScreen, name: str, value: str) -> None:
    """The value at once, as a paste would (a long path typed key by key re-plans the
    preview at every key)."""
    screen.query_one(f"#{name}", Input).value = value
    await pilot.pause()


def text(screen: LaunchScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


async def test_errors_show_next_to_the_field_they_concern() -> None:
    app = make_app()
    async with app.run_test(size=(160, 60)) as pilot:
        screen = await open_form(app, pilot)
        await set_field(pilot, screen, "gpus_per_host", "two")
        assert "'two' is not a whole number" in text(screen, "#error-gpus_per_host")
        await set_field(pilot, screen, "gpus_per_host", "0")
        assert "between 1 and" in text(screen, "#error-gpus_per_host")
        await set_field(pilot, screen, "gpus_per_host", "2")
        assert text(screen, "#error-gpus_per_host") == ""
        await set_field(pilot, screen, "env", "1BAD=x")
        assert "not a valid environment variable name" in text(screen, "#error-env")
        await set_field(pilot, screen, "env", "NCCL_DEBUG=INFO")
        await set_field(pilot, screen, "master_port", "80")
        assert "between 1024 and 65535" in text(screen, "#error-master_port")
        # Enter with an error: nothing launches, the cursor goes to the field.
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, LaunchScreen)
        assert app.focused is screen.query_one("#master_port", Input)
        assert "Not launched" in text(screen, "#launch-status")
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, LaunchScreen)


async def test_preview_shows_exact_commands_quoted_and_the_horovod_step_split() -> None:
    app = make_app()
    async with app.run_test(size=(160, 60)) as pilot:
        screen = await open_form(app, pilot)
        screen.query_one("#kind", Select).value = "horovod"
        await set_field(pilot, screen, "tags", "a100")
        await set_field(pilot, screen, "gpus_per_host", "3")
        await set_field(pilot, screen, "total_steps", "1000")
        await set_field(pilot, screen, "program", "train.py")
        await set_field(pilot, screen, "args", '--steps {steps_per_rank} "\'; touch /tmp/x #"')
        preview = text(screen, "#launch-preview")
        # 2 hosts x 3 GPUs: 1000 // 6 = 166 per GPU, 996 global, 4 dropped.
        assert "per GPU 166" in preview and "global 996" in preview and "dropped" in preview
        assert "horovodrun" in preview and "node2" not in preview
        # The hostile argument, quoted once for the rank's own line and again because that
        # line sits in the single-quoted per-rank script horovodrun runs on each host.
        once = shlex.quote("'; touch /tmp/x #")
        assert once == "''\"'\"'; touch /tmp/x #'"
        assert once.replace("'", "'\"'\"'") in preview
        assert "\n; touch /tmp/x" not in preview and " touch /tmp/x #\n" not in preview
        assert "node0" in preview and "[node0]" in preview


async def test_ps_fields_only_for_ps_jobs() -> None:
    app = make_app()
    async with app.run_test(size=(160, 60)) as pilot:
        screen = await open_form(app, pilot)
        assert not screen.query_one("#ps", Input).display
        screen.query_one("#kind", Select).value = "ps"
        await pilot.pause()
        assert screen.query_one("#ps", Input).display
        await set_field(pilot, screen, "program", "example:ps")
        await set_field(pilot, screen, "workers", "2")
        preview = text(screen, "#launch-preview")
        assert "TF_CONFIG" in preview and '"worker"' in preview


def test_form_values_become_a_spec_or_errors_by_field() -> None:
    base = {"kind": "ddp", "hosts": [], "program": "example:ddp"}
    spec, errors = form_to_spec({**base, "args": "--lr 0.1 'a b'", "env": "A=1 B='x y'"})
    assert errors == {} and spec is not None
    assert spec.args == ("--lr", "0.1", "a b") and spec.env == {"A": "1", "B": "x y"}
    assert form_to_spec({**base, "args": "'unbalanced"})[1].keys() == {"args"}
    assert form_to_spec({**base, "program": ""})[1].keys() == {"program"}
    assert form_to_spec({**base, "ps": "2"})[1] == {"ps": "only applies to --kind ps"}


async def test_preview_with_sync_runs_in_the_synced_copy(tmp_path: Path) -> None:
    project = tmp_path / "my project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "train.py").write_text("print('x')\n")
    app = make_app()
    async with app.run_test(size=(160, 60)) as pilot:
        screen = await open_form(app, pilot)
        screen.query_one("#kind", Select).value = "ddp"
        await set_field(pilot, screen, "program", "src/train.py")
        preview = text(screen, "#launch-preview")
        assert "sync:" not in preview and "trees/" not in preview
        await put_field(pilot, screen, "sync", str(project))
        await set_field(pilot, screen, "workdir", "src")
        preview = text(screen, "#launch-preview")
        copy = f"~/.cache/distconsole/sync/trees/my-project-{TREE_ID_PLACEHOLDER}/src"
        assert f"sync: {project} is copied to every host first" in preview
        assert preview.count(f"(cwd {copy})") == 3, preview  # every host's torchrun
        # What launches is the form's own spec; the launch plans it in the scanned tree.
        assert screen.spec is not None and screen.spec.workdir == "src"
