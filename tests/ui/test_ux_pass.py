"""Regressions from a hands-on pass through every screen (fixed inventory, no connections).

Each test is one problem a new user hit in ``distconsole demo``; they run without hosts.
"""

from __future__ import annotations

from textual.widgets import Footer, Input, Select, Static
from textual.widgets._footer import FooterKey
from ui_fixtures import FROZEN_NOW, fixed_statuses, static_inventory

from console.jobs.models import JobState
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.logs.models import LogBatch, LogLine
from console.logs.steps import StepTracker
from console.ui.app import DistConsoleApp
from console.ui.jobs_service import JobRow
from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.help import HelpScreen
from console.ui.screens.host_detail import HostDetailScreen
from console.ui.screens.hosts import HostsScreen
from console.ui.screens.jobs import JobsScreen
from console.ui.screens.launch import LaunchScreen
from console.ui.screens.logs import LogsScreen, steps_reading


def make_app() -> DistConsoleApp:
    return DistConsoleApp(static_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)


async def test_h_comes_back_to_the_hosts_from_every_other_screen() -> None:
    # `h` from the GPU or jobs screen used to raise UnknownModeError and end the app.
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        app.apply_statuses(fixed_statuses())
        for away, screen_type in (("g", ClusterScreen), ("j", JobsScreen)):
            await pilot.press(away)
            await pilot.pause()
            assert isinstance(app.screen, screen_type)
            await pilot.press("h")
            await pilot.pause()
            assert app.screen is app.hosts_screen
            assert isinstance(app.screen, HostsScreen)
        assert app.is_running


def job_row(job_id: str, started: float, *, state: JobState, failure: str = "") -> JobRow:
    return JobRow(
        job_id, "ddp-example-ddp", "ddp", state, started, None, ("node0", "node1"), 2, failure
    )


async def test_jobs_screen_shows_enter_as_logs_and_selects_a_job_just_launched() -> None:
    app = make_app()
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.press("j")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, JobsScreen)
        old = job_row("old-job", FROZEN_NOW - 60, state=JobState.SUCCEEDED)
        app.apply_job_rows([old])
        await pilot.pause()
        assert screen.selected_id == "old-job"
        # A job launched from the form: it is listed first and the cursor goes to it.
        screen.select_job("new-job")
        new = job_row("new-job", FROZEN_NOW, state=JobState.RUNNING)
        app.apply_job_rows([new, old])
        await pilot.pause()
        assert screen.selected_id == "new-job"
        # Later refreshes keep whatever the user selects afterwards.
        await pilot.press("down")
        app.apply_job_rows([new, old])
        await pilot.pause()
        assert screen.selected_id == "old-job"
        enter = screen.active_bindings["enter"].binding
        assert enter.description == "Logs"
        footer_keys = {k.key: k.description for k in screen.query_one(Footer).query(FooterKey)}
        assert footer_keys.get("enter") == "Logs"
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        keys = {(k.key, k.description, k.scope) for k in app.screen.keys}
        assert ("⏎", "Logs", "Jobs screen (j): this screen") in keys


async def test_a_failed_jobs_detail_ends_with_the_last_lines_of_its_output() -> None:
    tail = [f"  File 'launch.py', line {i}, in run" for i in range(14)]
    failure = "\n".join(
        [
            "node0 launcher-0 (ranks 0-3) failed: exit status 1",
            "last lines of its output:",
            *tail,
            "RuntimeError: process 0 exited with status 134",
        ]
    )
    app = make_app()
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.press("j")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, JobsScreen)
        app.apply_job_rows([job_row("bad-job", FROZEN_NOW, state=JobState.FAILED, failure=failure)])
        await pilot.pause()
        detail = screen.query_one("#job-detail", Static)
        shown = str(detail.render()).splitlines()
        assert detail.size.height >= len(shown)  # nothing is cut off below
        assert shown[0] == "bad-job: failed"
        assert shown[1] == "node0 launcher-0 (ranks 0-3) failed: exit status 1"
        assert shown[-1] == "RuntimeError: process 0 exited with status 134"
        assert "…" in shown


async def test_launch_preview_keeps_its_job_id_and_follows_the_kind() -> None:
    app = make_app()
    async with app.run_test(size=(160, 60)) as pilot:
        await pilot.press("l")
        await pilot.pause()
        form = app.screen
        assert isinstance(form, LaunchScreen)

        def preview() -> str:
            return str(form.query_one("#launch-preview", Static).render())

        first = preview().splitlines()[0]
        assert first.startswith("job ddp-example-ddp-")
        assert "placeholder port" in preview()  # the launch asks the master host for one
        args = form.query_one("#args", Input)
        args.focus()
        await pilot.press(*"--steps 10")
        await pilot.pause()
        assert preview().splitlines()[0] == first  # typing does not make up a new job id
        assert "--steps 10" in preview()
        # Another kind while the program is the bundled example: that kind's example.
        form.query_one("#kind", Select).value = "horovod"
        await pilot.pause()
        assert form.query_one("#program", Input).value == "example:horovod"
        assert "example_horovod.py" in preview()
        assert "None" not in preview()  # horovodrun has no master port to show
        form.query_one("#kind", Select).value = "mpi"
        await pilot.pause()
        assert form.query_one("#program", Input).value == "example:mpi"  # needs no horovod
        # A program of the user's own stays whatever the kind.
        form.query_one("#program", Input).value = "train.py"
        form.query_one("#kind", Select).value = "ddp"
        await pilot.pause()
        assert form.query_one("#program", Input).value == "train.py"


def progress_of(steps: dict[int, int], printed_total: int | None, plan_total: int | None) -> str:
    tracker = StepTracker()
    of = f"/{printed_total}" if printed_total else ""
    tracker.feed(
        LogLine("j", "node0", rank, rank, "stdout", f"rank {rank} step {step}{of}", FROZEN_NOW)
        for rank, step in steps.items()
    )
    return steps_reading(tracker.job(plan_total), split_total=plan_total is not None)


def test_the_steps_total_stands_next_to_the_counter_it_belongs_to() -> None:
    # DDP: every rank prints "step N/300" and runs all 300: rank 0's counter, not the sum.
    assert progress_of({0: 70, 1: 69}, 300, None) == "steps: rank 0 70/300 · sum 139"
    # Horovod: a total of 200 split over the ranks: the sum of the counters reaches it.
    assert progress_of({0: 20, 1: 19}, None, 200) == "steps: sum 39/200 · rank 0 20"
    # No rank 0 among the stepping ranks: no "rank 0 None".
    assert progress_of({1: 5, 2: 5}, 300, None) == "steps: sum 10"
    assert progress_of({1: 5, 2: 5}, None, 200) == "steps: sum 10/200"


async def test_enter_on_a_host_opens_its_detail_and_escape_comes_back() -> None:
    app = make_app()
    async with app.run_test(size=(140, 30)) as pilot:
        app.apply_statuses(fixed_statuses())
        await pilot.press("down")  # node1
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, HostDetailScreen)
        assert app.screen.host.name == "node1"
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.hosts_screen


async def test_palette_reaches_jobs_and_launch_and_help_names_screens_plainly() -> None:
    app = make_app()
    async with app.run_test(size=(140, 40)) as pilot:
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {"Jobs", "Launch"} <= titles
        plan_ = plan(make_spec(kind="ddp", program="example:ddp"), app.inventory, job_id="job-7")
        await app.push_screen(LogsScreen(plan_, app.services, follow_hosts=False))
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        scopes = {k.scope for k in app.screen.keys}
        assert "Logs of a job (Enter on the jobs screen): this screen" in scopes
        assert not any("job-7" in scope for scope in scopes)


async def test_the_first_log_lines_show_with_their_prefix_not_as_reprs() -> None:
    # "node0 r0" is exactly as wide as the view's starting prefix width: no rebuild came
    # before these lines were appended.
    app = make_app()
    async with app.run_test(size=(140, 30)) as pilot:
        plan_ = plan(make_spec(kind="ddp", program="example:ddp"), app.inventory, job_id="job-7")
        logs = LogsScreen(plan_, app.services, follow_hosts=False)
        await app.push_screen(logs)
        await pilot.pause()
        lines = tuple(
            LogLine("job-7", "node0", r, r, "stdout", f"rank {r} step 1/9", FROZEN_NOW)
            for r in (0, 1)
        )
        logs.apply_batches([LogBatch("node0", lines, received=FROZEN_NOW)])
        await pilot.pause()
        rows = ["".join(s.text for s in logs.view.render_line(y)) for y in range(2)]
        assert rows[0].startswith("node0 r0 │ rank 0 step 1/9"), rows
        assert rows[1].startswith("node0 r1 │ rank 1 step 1/9"), rows
