"""Issue 30 (4): the training curves start at the job's first step. Opened on a job that
has run a while, the logs screen receives its backlog (steps 1 to 402) in one batch; the
curves drew from 402 on, the early loss missing. Lines are fed as the follower delivers
them (it reads every rank file from offset 0; it runs over real sshd in tests/ui/
test_logs_live.py)."""

from __future__ import annotations

from console.inventory import Host, Inventory
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.logs.models import LogBatch, LogLine
from console.ui.app import DistConsoleApp
from console.ui.screens.curves import CurvesScreen
from console.ui.screens.logs import LogsScreen

NOW = 1_700_000_000.0
INVENTORY = Inventory(
    path="/srv/hosts.yaml",
    hosts=tuple(Host(name=f"node{i}", address=f"10.0.0.{10 + i}") for i in range(2)),
)


def backlog(job: str, steps: range) -> LogBatch:
    lines = [
        LogLine(job, f"node{rank}", rank, 0, "stdout", text, NOW + step / 10)
        for step in steps
        for rank in range(2)
        for text in (f"rank {rank} step {step}/500 loss {3.0 / step:.4f} steps/s 10.0",)
    ]
    return LogBatch("node0", tuple(lines), received=NOW + steps[-1] / 10)


async def test_curves_draw_from_step_one_when_the_backlog_comes_in_one_batch() -> None:
    app = DistConsoleApp(INVENTORY, connections_factory=None, clock=lambda: NOW + 60)
    async with app.run_test(size=(120, 40)) as pilot:
        spec = make_spec(kind="ddp", program="example:ddp", gpus_per_host=1)
        job = plan(spec, INVENTORY, job_id="curves-backlog")
        logs = LogsScreen(job, app.services, follow_hosts=False)
        await app.push_screen(logs)
        logs.apply_batches([backlog(job.job_id, range(1, 403))])
        logs.panels.refresh_steps()
        await pilot.press("c")
        await pilot.pause()
        assert isinstance(app.screen, CurvesScreen)
        curves = app.screen.store.curves()
        assert len(curves) == 2
        for points in curves.values():
            assert [p.step for p in points] == list(range(1, 403))
            assert points[0].loss == 3.0
        # Live lines after the curves opened add on, after the backlog's points.
        logs.apply_batches([backlog(job.job_id, range(403, 406))])
        app.screen.redraw()
        assert [p.step for p in next(iter(app.screen.store.curves().values()))][-1] == 405


async def test_a_resumed_host_leaves_the_logs_header() -> None:
    # The follower says "disconnected" when its stream broke (a rank shell held the
    # console), then "resumed" once it follows again: the header must not keep the first.
    from textual.widgets import Static

    from console.logs.models import FollowNote

    app = DistConsoleApp(INVENTORY, connections_factory=None, clock=lambda: NOW + 60)
    async with app.run_test(size=(160, 40)) as pilot:
        spec = make_spec(kind="ddp", program="example:ddp", gpus_per_host=1)
        logs = LogsScreen(
            plan(spec, INVENTORY, job_id="shell-back"), app.services, follow_hosts=False
        )
        await app.push_screen(logs)

        def note(kind: str) -> LogBatch:
            return LogBatch("node1", (), (FollowNote("node1", "", kind, ""),), NOW)

        logs.apply_batches([note("disconnected")])
        await pilot.pause()
        header = logs.query_one("#logs-summary", Static)
        assert "node1: disconnected" in str(header.render())
        logs.apply_batches([note("resumed"), backlog("shell-back", range(1, 3))])
        await pilot.pause()
        assert "disconnected" not in str(header.render())
