"""Slurm jobs on the GPU screen, driven with Pilot: a fixed occupancy (what the squeue
poller, ``console/jobs/slurm_queue.py``, yields) goes through the app's own store, as
the app's worker would hand it, over the dense fixtures' 256 hosts (no Slurm needed;
``tests/integration/test_slurm_gpu_screen.py`` runs the poller against a real one).

node200..202 run no distconsole job in the fixtures: their GPUs are Slurm's here."""

from __future__ import annotations

from typing import Any

from dense_fixtures import dense_inventory, dense_statuses, dense_views
from textual.pilot import Pilot
from textual.widgets import Static
from ui_fixtures import FROZEN_NOW

from console.jobs.slurm_queue import SlurmJobOnNode
from console.ui.app import DistConsoleApp
from console.ui.overview import ClusterSummary, HostTotals, summary_text
from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.host_detail import HostDetailScreen
from console.ui.widgets.gpu_grid import GpuGrid

SIZE = (200, 50)
BOB = ("4242", "bob", "train", "RUNNING")
MINE = ("77", "alice", "eval", "RUNNING")


def job(fields: tuple[str, str, str, str], indices: tuple[int, ...], mine: bool) -> SlurmJobOnNode:
    return SlurmJobOnNode(*fields, gpus=len(indices), gpu_indices=indices, mine=mine)


OCCUPANCY = {
    "node200": (job(BOB, (0, 1, 2, 3), False),),
    "node201": (job(BOB, (0, 1, 2, 3), False), job(MINE, (6, 7), True)),
    # a CPU-only job: listed on the host, holds no cell
    "node202": (SlurmJobOnNode("80", "carol", "prep", "RUNNING"),),
    "n999": (job(BOB, (0,), False),),  # a node no inventory host maps to: not on this screen
}


async def open_dense(app: DistConsoleApp, pilot: Pilot[Any]) -> ClusterScreen:
    await pilot.press("g")
    await pilot.pause()
    app.apply_statuses(dense_statuses())
    app.apply_views(dense_views(0))
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, ClusterScreen) and screen.dense
    return screen


def markers(grid: GpuGrid, host: str) -> str:
    """The marker of each GPU cell of ``host``'s block (a letter, ! or a blank)."""
    line, column = grid.grid.where[host]
    width = grid.shape.block_width
    block = grid.line_text(line)[column * width : (column + 1) * width]
    cells = block[grid.shape.name_width + 1 :]
    step = grid.shape.cell_width
    return "".join(cells[i + step - 1] for i in range(0, grid.shape.gpus * step, step))


def text_of(screen: ClusterScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


async def test_slurm_jobs_mark_cells_summary_and_host_detail() -> None:
    app = DistConsoleApp(dense_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_dense(app, pilot)
        grid = screen.grid
        assert markers(grid, "node200") == " " * 8  # before: no job holds these GPUs
        app.apply_slurm(OCCUPANCY)
        await pilot.pause()
        assert set(app.store.slurm) == {"node200", "node201", "node202"}
        letters = grid.letters.labels()
        bob, mine = letters["slurm 4242 bob train"], letters["slurm 77 alice eval (yours)"]
        assert markers(grid, "node200") == bob * 4 + " " * 4
        assert markers(grid, "node201") == bob * 4 + " " * 2 + mine * 2
        assert markers(grid, "node202") == " " * 8
        legend = text_of(screen, "#grid-legend")
        assert f"{bob} slurm 4242 bob train 8 GPUs" in legend
        assert f"{mine} slurm 77 alice eval (yours) 2 GPUs" in legend
        assert "carol" not in legend  # no GPU held: not a GPU line

        grid.set_cursor("node201")
        await pilot.press("enter")
        await pilot.pause()
        detail = app.screen
        assert isinstance(detail, HostDetailScreen) and detail.host.name == "node201"
        header = str(detail.query_one("#detail-host", Static).render())
        assert "Slurm: slurm 4242 bob train: RUNNING, GPUs 0,1,2,3" in header
        assert "Slurm: slurm 77 alice eval (yours): RUNNING, GPUs 6,7" in header
        await pilot.press("escape")
        await pilot.pause()

        # The jobs end: squeue lists none, the cells and the legend let them go.
        app.apply_slurm({})
        await pilot.pause()
        assert app.store.slurm == {}
        assert markers(grid, "node201") == " " * 8
        assert "slurm 4242" not in text_of(screen, "#grid-legend")


def test_summary_counts_slurm_gpus_of_unsampled_hosts_too() -> None:
    # node201 has no sample (unreachable over SSH): Slurm still says who holds its GPUs.
    totals = [HostTotals.of(view) for name, view in dense_views(0).items() if name != "node201"]
    summary = ClusterSummary.of(256, totals, [OCCUPANCY["node200"], OCCUPANCY["node201"]])
    jobs = dict(summary.jobs)
    assert jobs["slurm 4242 bob train"] == 8 and jobs["slurm 77 alice eval (yours)"] == 2
    assert "llama-70b" in jobs and "slurm 80 carol prep" not in jobs
    text = summary_text(summary)
    assert "+2 more" in text  # the line names the 4 biggest jobs; the dense legend all
