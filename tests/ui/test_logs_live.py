"""The logs screen over a real job: torchrun on two real sshd hosts, opened from the
jobs screen with Enter; every rank's lines arrive with their rank, steps are read."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sshd_cluster import SshdCluster
from textual.pilot import Pilot
from textual.widgets import DataTable

from console import inventory as inventory_module
from console.jobs.spec import make_spec
from console.settings import make_settings
from console.ui.app import DistConsoleApp
from console.ui.screens.jobs import JobsScreen
from console.ui.screens.logs import LogsScreen

pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.timeout(240)]


async def until(pilot: Pilot[Any], check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        await pilot.pause(0.2)
    raise AssertionError(f"not within {timeout}s: {what}")


async def test_logs_of_a_running_job_show_every_rank_and_its_steps(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISTCONSOLE_DATA_DIR", str(tmp_path / "data"))
    cluster = sshd_cluster(n=2)
    inventory = inventory_module.load(cluster.write_inventory(tmp_path / "hosts.yaml"))
    app = DistConsoleApp(inventory, settings=make_settings(monitor_interval_s=None))
    async with app.run_test(size=(200, 50)) as pilot:
        await until(pilot, lambda: app.jobs is not None, 30, "job control ready")
        assert app.jobs is not None
        await until(
            pilot,
            lambda: all(app.hosts_screen.table.state_of(h.name) == "up" for h in inventory.hosts),
            30,
            "hosts up",
        )
        spec = make_spec(
            kind="ddp", program="example:ddp", gpus_per_host=1, name="ui-logs",
            args=["--steps", "400", "--sleep", "0.05"],
        )  # fmt: skip
        job = await app.jobs.launch(spec, preflight=False)
        await pilot.press("j")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), 5, "jobs screen")
        jobs = app.screen
        assert isinstance(jobs, JobsScreen)
        await until(pilot, lambda: jobs.selected_id == job.id, 5, "the job is listed")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, LogsScreen), 5, "logs screen")
        logs = app.screen
        assert isinstance(logs, LogsScreen)

        def both_ranks_step() -> bool:
            text = logs.shown_text()
            return all(
                any(t.startswith(f"{host} r{rank}| rank {rank} step") for t in text)
                for host, rank in (("node0", 0), ("node1", 1))
            )

        await until(pilot, both_ranks_step, 90, "step lines of rank 0 on node0 and rank 1 on node1")
        logs._refresh_steps()
        steps = logs.query_one("#steps-table", DataTable)
        ranks = {steps.get_row_at(i)[0].plain for i in range(steps.row_count)}
        assert {"r0", "r1"} <= ranks
        # Steps/s and Lag fill in from the example's own lines (issue 9).
        header = [str(column.label) for column in steps.columns.values()]
        for i in range(steps.row_count):
            row = [cell.plain for cell in steps.get_row_at(i)]
            if row[0] in ("r0", "r1"):
                assert float(row[header.index("Steps/s")]) > 0
                assert row[header.index("Lag")].isdigit()
        await app.jobs.stop(job.id)
