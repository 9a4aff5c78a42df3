"""Issue 30 (4): keys and words on the screens. Home/End move the selection in the jobs
and hosts tables; Enter opens the host after the attention view was toggled; a job's
process without a rank yet says its job, not "rank None"; a launch that has already
ended is not announced as running. Pilot on the real app, fixed views (no GPU here),
a real job history."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from textual.widgets import DataTable
from ui_fixtures import FROZEN_NOW, gpu_inventory, gpu_views

from console.inventory import Host, Inventory
from console.jobs.history import JobHistory
from console.jobs.models import JobState
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.probe.models import GpuProcess
from console.transport.pool import ClusterConnections
from console.ui.app import DistConsoleApp, launched_text
from console.ui.jobs_service import JobsService
from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.host_detail import HostDetailScreen
from console.ui.screens.hosts import HostsScreen
from console.ui.screens.jobs import JobsScreen
from console.ui.widgets.gpu_panel import HostPanel

INVENTORY = Inventory(
    path="/srv/keys/hosts.yaml",
    hosts=tuple(Host(name=f"node{i}", address=f"10.0.0.{10 + i}", gpus=1) for i in range(4)),
)


def history_of(tmp_path: Path, jobs: int, inventory: Inventory = INVENTORY) -> JobHistory:
    history = JobHistory(tmp_path / "jobs.sqlite3")
    for i in range(jobs):
        spec = make_spec(kind="ddp", program="t.py", gpus_per_host=1, name=f"j{i}")
        job = plan(spec, inventory, job_id=f"job-{i}")
        history.add(job, inventory=inventory.path, started=FROZEN_NOW - 600 + i)
        history.record_from_hosts(
            job.job_id, JobState.SUCCEEDED, ended=FROZEN_NOW - 5, failure=None, view={}
        )
    return history


async def test_home_and_end_move_the_selection_in_jobs_and_hosts(tmp_path: Path) -> None:
    history = history_of(tmp_path, 4)
    app = DistConsoleApp(INVENTORY, connections_factory=None, clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(120, 40)) as pilot:
        service = JobsService(ClusterConnections(INVENTORY), INVENTORY, history=history)
        app.services.jobs = service
        await pilot.press("j")
        app.apply_job_rows(await service.history_rows())
        await pilot.pause()
        jobs = app.screen
        assert isinstance(jobs, JobsScreen)
        table = jobs.query_one("#jobs-table", DataTable)
        table.focus()
        await pilot.press("end")
        assert table.cursor_row == 3 and jobs.selected_id == "job-0"  # newest first
        await pilot.press("home")
        assert table.cursor_row == 0 and jobs.selected_id == "job-3"
        await pilot.press("h")
        await pilot.pause()
        hosts = app.screen
        assert isinstance(hosts, HostsScreen)
        hosts.table.focus()
        await pilot.press("end")
        assert hosts.table.selected_host == "node3"
        await pilot.press("home")
        assert hosts.table.selected_host == "node0"


async def test_enter_opens_the_host_after_the_attention_view_is_toggled() -> None:
    # A healthy cluster (the demo's): the attention view shows no host, focus is lost.
    spare = gpu_inventory().hosts[2]
    inventory = Inventory(path="/srv/cluster/hosts.yaml", hosts=(spare,))
    app = DistConsoleApp(inventory, connections_factory=None, clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("g")
        await pilot.pause()
        app.apply_views({spare.name: gpu_views()[spare.name]})
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ClusterScreen)
        await pilot.press("a")
        await pilot.pause()
        assert screen.visible_hosts() == []
        await pilot.press("enter")  # no host shown: nothing to open
        await pilot.pause()
        assert app.screen is screen
        await pilot.press("a", "enter")
        await pilot.pause()
        assert isinstance(app.screen, HostDetailScreen)
        assert app.screen.host.name == spare.name


async def test_a_job_process_without_a_rank_says_its_job() -> None:
    app = DistConsoleApp(gpu_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.press("g")
        await pilot.pause()
        views = gpu_views()
        node0 = views["node0"]
        assert node0.sample is not None
        launcher = GpuProcess(pid=4000, command="torchrun", used_memory_mib=500.0, job="ddp-x")
        gpus = list(node0.sample.gpus)
        gpus[3] = replace(gpus[3], processes=(launcher,))
        views["node0"] = replace(node0, sample=replace(node0.sample, gpus=tuple(gpus)))
        app.apply_views(views)
        await pilot.pause()
        text = app.screen.query_one("#panel-node0", HostPanel).render().plain
        assert "rank None" not in text
        assert "job ddp-x  " in text and "job resnet-ddp rank 0" in text


async def test_a_launch_that_already_ended_is_not_called_running(tmp_path: Path) -> None:
    history = history_of(tmp_path, 1)
    service = JobsService(ClusterConnections(INVENTORY), INVENTORY, history=history)
    [row] = await service.history_rows()
    assert launched_text("job-0", row) == "Job job-0 started and has already succeeded"
    assert launched_text("job-9", None) == "Job job-9 started"


async def test_at_80x24_the_title_keeps_the_path_and_the_footer_its_last_keys(
    tmp_path: Path,
) -> None:
    path = "/tmp/distconsole-demo-k2j3l4m5/hosts.yaml"  # as `distconsole demo` names it
    inventory = Inventory(path=path, hosts=INVENTORY.hosts)
    history = history_of(tmp_path, 1, inventory)
    app = DistConsoleApp(inventory, connections_factory=None, clock=lambda: FROZEN_NOW)
    app.title, app.sub_title = "demo", path  # what the demo's run() sets
    async with app.run_test(size=(80, 24)) as pilot:
        service = JobsService(ClusterConnections(inventory), inventory, history=history)
        app.services.jobs = service
        for key in ("g", "j", "h"):
            await pilot.press(key)
            if key == "j":
                app.apply_job_rows(await service.history_rows())
            await pilot.pause()
            lines = [strip.text for strip in app.screen._compositor.render_strips()]
            assert path in lines[0], lines[0]
            assert lines[-1].rstrip().endswith("? Help : Commands"), lines[-1]
            if key == "j":
                assert any(" succeeded " in line for line in lines), lines
