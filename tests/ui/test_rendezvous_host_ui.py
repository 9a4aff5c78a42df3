"""Issue 31 item 6 on the screens (Pilot, no hosts): a running job with a rendezvous
host shows it apart from its training hosts on the jobs screen (its hosts cell) and on
the GPU screen (the host panel's title names its role while the job runs)."""

from __future__ import annotations

from dataclasses import replace

from textual.widgets import DataTable
from ui_fixtures import FROZEN_NOW, gpu_inventory

from console.jobs.models import JobState
from console.ui.app import DistConsoleApp
from console.ui.job_rows import JobRow
from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.jobs import JobsScreen
from console.ui.widgets.gpu_panel import HostPanel


async def test_the_jobs_and_gpu_screens_show_the_rendezvous_host_apart() -> None:
    app = DistConsoleApp(gpu_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)
    row = JobRow(
        "job-r", "job-r", "ddp", JobState.RUNNING, FROZEN_NOW - 60, None,
        ("node0", "node1", "node2"), 3, "", rendezvous_host="node3",
    )  # fmt: skip
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("j")
        await pilot.pause()
        assert isinstance(app.screen, JobsScreen)
        app.apply_job_rows([row])
        await pilot.pause()
        table = app.screen.query_one("#jobs-table", DataTable)
        cell = table.get_cell("job-r", "hosts")
        assert str(cell) == "node0, node1, node2 · rendezvous node3", cell
        await pilot.press("g")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ClusterScreen)
        titles = {p.host.name: str(p.border_title) for p in screen.query(HostPanel)}
        assert titles["node3"].endswith(" · rendezvous of job-r"), titles
        assert not any("rendezvous" in t for h, t in titles.items() if h != "node3"), titles
        app.apply_job_rows([replace(row, state=JobState.SUCCEEDED, ended=FROZEN_NOW)])
        await pilot.pause()
        node3 = next(p for p in screen.query(HostPanel) if p.host.name == "node3")
        assert "rendezvous" not in str(node3.border_title)  # the job is over
