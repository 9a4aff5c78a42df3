"""Slurm jobs on the GPU screen, driven with Pilot: a fixed occupancy (what the squeue
poller, ``console/jobs/slurm/queue.py``, yields) goes through the app's own store, as
the app's worker would hand it, over the dense fixtures' 256 hosts (no Slurm needed;
``tests/integration/test_slurm_gpu_screen.py`` runs the poller against a real one).

node200..202 run no distconsole job in the fixtures: their GPUs are Slurm's here."""

from __future__ import annotations

from typing import Any

from dense_fixtures import dense_inventory, dense_statuses, dense_views
from textual.pilot import Pilot
from textual.widgets import Static
from ui_fixtures import FROZEN_NOW

from console.jobs.slurm.queue import SlurmJobOnNode, with_console_jobs
from console.ui.app import DistConsoleApp
from console.ui.overview import ClusterSummary, HostTotals, summary_text
from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.host_detail import NOT_SAMPLED_OTHERS, HostDetailScreen, slurm_lines
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
    # a node no inventory host maps to: drawn as a host known only from Slurm
    "n999": (job(BOB, (0,), False),),
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
        assert set(app.store.slurm) == {"node200", "node201", "node202", "n999"}
        assert list(app.store.slurm_hosts) == ["n999"] and "n999" in grid.grid.where
        letters = grid.letters.labels()
        bob, mine = letters["slurm 4242 bob train"], letters["slurm 77 alice eval (yours)"]
        assert markers(grid, "node200") == bob * 4 + " " * 4
        assert markers(grid, "node201") == bob * 4 + " " * 2 + mine * 2
        assert markers(grid, "node202") == " " * 8
        legend = text_of(screen, "#grid-legend")
        assert f"{bob} slurm 4242 bob train 9 GPUs" in legend  # n999's too
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
        assert "n999" in grid.grid.where  # still drawn, as an inventory host would be
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


async def test_sort_and_group_by_job_fall_back_to_the_slurm_job() -> None:
    app = DistConsoleApp(dense_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_dense(app, pilot)
        grid = screen.grid
        app.apply_slurm(OCCUPANCY)
        await pilot.pause()
        while grid.sort != "job":
            await pilot.press("s")
        await pilot.pause()
        order = list(grid.grid.order)
        # node200/201 run no distconsole process: Slurm's job places them, before the
        # hosts no job holds (node184.., node202 whose Slurm job holds no GPU)
        assert order.index("node201") == order.index("node200") + 1
        assert order.index("node201") < order.index("node184") < order.index("node202")
        while grid.group != "job":
            await pilot.press("b")
        await pilot.pause()
        lines = grid.grid.lines
        bob = "slurm 4242 bob train (3 hosts)"  # n999, known only from Slurm, too
        headings = [i for i, (heading, _row) in enumerate(lines) if heading is not None]
        at = next(i for i in headings if lines[i][0] == bob)
        following = next(i for i in headings if i > at)
        under_bob = {h for _heading, row in lines[at:following] for h in row}
        assert under_bob == {"node200", "node201", "n999"}


async def test_an_open_host_detail_follows_the_slurm_jobs() -> None:
    app = DistConsoleApp(dense_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_dense(app, pilot)
        screen.grid.set_cursor("node201")
        await pilot.press("enter")
        await pilot.pause()
        detail = app.screen
        assert isinstance(detail, HostDetailScreen)

        def header() -> str:
            return str(detail.query_one("#detail-host", Static).render())

        assert "Slurm:" not in header()
        app.apply_slurm(OCCUPANCY)  # while the detail is open
        await pilot.pause()
        assert "Slurm: slurm 77 alice eval (yours): RUNNING, GPUs 6,7" in header()
        app.apply_slurm({"node201": OCCUPANCY["node200"]})  # alice's job ended
        await pilot.pause()
        assert "slurm 77" not in header() and "slurm 4242 bob train" in header()


def test_a_job_the_console_launched_through_slurm_counts_once() -> None:
    views = dense_views(0)
    totals = [HostTotals.of(view) for view in views.values()]
    alone = dict(ClusterSummary.of(256, totals).jobs)["llama-70b"]
    # The console launched llama-70b through Slurm as job 4243 (slurm_store's row):
    # squeue lists it on node0 and node1, where its processes are sampled too.
    ours = job(("4243", "alice", "llama-70b", "RUNNING"), tuple(range(8)), True)
    occupancy = {"node0": (ours,), "node1": (ours,)}
    labelled = with_console_jobs(occupancy, {"4243": "llama-70b"})
    assert labelled["node0"][0].label == "llama-70b"
    jobs = dict(ClusterSummary.of(256, totals, labelled.values()).jobs)
    assert jobs["llama-70b"] == alone
    assert not [name for name in jobs if "4243" in name]  # not again as 'slurm 4243'
    # without the store's row it is someone's Slurm job, counted on its own line
    jobs = dict(ClusterSummary.of(256, totals, occupancy.values()).jobs)
    assert jobs["slurm 4243 alice llama-70b (yours)"] == 16
    # the host detail still names its Slurm id
    assert slurm_lines(labelled["node0"]) == [
        "Slurm: llama-70b (slurm 4243): RUNNING, GPUs 0,1,2,3,4,5,6,7"
    ]


def test_others_jobs_on_an_unsampled_host_say_why_there_are_no_figures() -> None:
    lines = slurm_lines(OCCUPANCY["node201"], sampled=False)
    assert lines[0].endswith(f"; {NOT_SAMPLED_OTHERS}")  # bob's: srun needs its owner
    assert NOT_SAMPLED_OTHERS not in lines[1]  # the console user's own (sampled via srun)
