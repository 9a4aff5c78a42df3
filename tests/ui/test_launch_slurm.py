"""The launch form's Scheduler choice with Pilot: with a slurm: section in the
inventory, choosing slurm previews the sbatch script the login host would submit (the
one ``plan --scheduler slurm`` prints), the Nodes field names a bad count, and the
choice is kept in the draft. Without the section the form has no Scheduler at all.
The submit itself runs on the real Slurm cluster in tests/integration/test_slurm_jobs.py."""

from __future__ import annotations

from typing import Any

from test_launch_form import INVENTORY, open_form, set_field, text
from textual.pilot import Pilot
from textual.widgets import Select
from ui_fixtures import FROZEN_NOW

from console.inventory import Inventory, SlurmSettings
from console.ui.app import DistConsoleApp
from console.ui.screens.launch import LaunchScreen

WITH_SLURM = Inventory(
    path=INVENTORY.path,
    hosts=INVENTORY.hosts,
    slurm=SlurmSettings(login="node0", partition="gpu"),
)


def make_app(inventory: Inventory) -> DistConsoleApp:
    return DistConsoleApp(inventory, connections_factory=None, clock=lambda: FROZEN_NOW)


async def choose(pilot: Pilot[Any], screen: LaunchScreen, scheduler: str) -> None:
    screen.query_one("#scheduler", Select).value = scheduler
    await pilot.pause()


async def test_choosing_slurm_previews_the_sbatch_script() -> None:
    app = make_app(WITH_SLURM)
    async with app.run_test(size=(160, 60)) as pilot:
        screen = await open_form(app, pilot)
        assert not screen.query_one("#nodes").display  # ssh: no node count
        ssh_preview = text(screen, "#launch-preview")
        assert "#SBATCH" not in ssh_preview
        await choose(pilot, screen, "slurm")
        assert screen.query_one("#nodes").display
        await set_field(pilot, screen, "nodes", "2")
        await set_field(pilot, screen, "gpus_per_host", "4")
        preview = text(screen, "#launch-preview")
        assert "ddp on Slurm, submitted on node0, world size 8" in preview
        for line in ("#SBATCH --nodes=2", "#SBATCH --gpus-per-node=4", "#SBATCH --partition=gpu"):
            assert line in preview.splitlines(), preview
        assert "srun --kill-on-bad-exit=1" in preview and "--nproc-per-node 4" in preview
        assert "log (task 1): node0:" in preview
        await set_field(pilot, screen, "nodes", "0")
        assert "a whole number >= 1" in text(screen, "#error-nodes")
        assert "#SBATCH" not in text(screen, "#launch-preview")
        await set_field(pilot, screen, "nodes", "2")
        await pilot.press("escape")
        await pilot.pause()
        # the draft keeps the choice: the next form opens on slurm, 2 nodes
        screen = await open_form(app, pilot)
        assert screen.query_one("#scheduler", Select).value == "slurm"
        assert "#SBATCH --nodes=2" in text(screen, "#launch-preview")
        await choose(pilot, screen, "ssh")
        assert "#SBATCH" not in text(screen, "#launch-preview")


async def test_no_scheduler_without_a_slurm_section() -> None:
    app = make_app(INVENTORY)
    async with app.run_test(size=(160, 60)) as pilot:
        screen = await open_form(app, pilot)
        assert not screen.query("#scheduler") and not screen.query("#nodes")
