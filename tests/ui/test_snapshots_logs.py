"""Snapshots of the logs screen at 80x24 and 200x50 (pytest-textual-snapshot): the steps
table below the log (narrow) or beside it (wide), sized to its rows, and a long line
wrapped under its text. Lines are fed into the screen (no hosts); "now" is frozen.
Update after an intended change with ``pytest tests/ui/test_snapshots_logs.py --snapshot-update``.
"""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot
from ui_fixtures import FROZEN_NOW

from console.inventory import Host, Inventory
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.logs.models import LogBatch, LogLine
from console.ui.app import DistConsoleApp
from console.ui.screens.logs import LogsScreen

INVENTORY = Inventory(
    path="/srv/hosts.yaml",
    hosts=(Host(name="node0", address="10.0.0.10"), Host(name="node1", address="10.0.0.11")),
)
PLAN = plan(make_spec(kind="ddp", program="example:ddp", gpus_per_host=2), INVENTORY, job_id="d-1")


async def show_logs(pilot: Pilot[Any]) -> None:
    app = pilot.app
    assert isinstance(app, DistConsoleApp)
    await pilot.press("j")
    screen = LogsScreen(PLAN, app.services, follow_hosts=False)
    await app.push_screen(screen)
    lines = [
        LogLine("d-1", f"node{rank // 2}", rank, rank % 2, "stdout",
                f"rank {rank} step {step}/20 loss {1 / step:.4f} samples/s 2890.2 steps/s "
                f"{90 - rank:.2f}", FROZEN_NOW)
        for step in range(1, 21 - 0) for rank in range(4) if step <= 20 - rank
    ]  # fmt: skip
    words = " ".join(f"word{i:03d}" for i in range(40))
    lines.append(LogLine("d-1", "node1", 3, 1, "stderr", f"Warning: {words}", FROZEN_NOW))
    screen.apply_batches([LogBatch("node0", tuple(lines), received=FROZEN_NOW)])
    screen._refresh_steps()
    await pilot.press("w")
    await pilot.pause()


@pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=["80x24", "200x50"])
def test_logs_screen(snap_compare: Any, size: tuple[int, int]) -> None:
    app = DistConsoleApp(INVENTORY, connections_factory=None, clock=lambda: FROZEN_NOW)
    assert snap_compare(app, terminal_size=size, run_before=show_logs)
