"""Regressions from a hands-on pass through every screen (fixed inventory, no connections).

Each test is one problem a new user hit in ``distconsole demo``; they run without hosts.
"""

from __future__ import annotations

from textual.widgets import Footer, Input, Select, Static
from textual.widgets._footer import FooterKey
from ui_fixtures import FROZEN_NOW, fixed_statuses, static_inventory

from console.jobs.models import JobState
from console.ui.app import DistConsoleApp
from console.ui.job_control import JobRow
from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.help import HelpScreen
from console.ui.screens.hosts import HostsScreen
from console.ui.screens.jobs import JobsScreen
from console.ui.screens.launch import LaunchScreen


def make_app() -> DistConsoleApp:
    return DistConsoleApp(static_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)


async def test_h_comes_back_to_the_hosts_from_every_other_screen() -> None:
    # `h` from the GPU or jobs screen used to raise UnknownModeError and end the app.
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        app.hosts_screen.apply_statuses(fixed_statuses())
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
        screen.show_rows([old])
        await pilot.pause()
        assert screen.selected_id == "old-job"
        # A job launched from the form: it is listed first and the cursor goes to it.
        screen.select_job("new-job")
        new = job_row("new-job", FROZEN_NOW, state=JobState.RUNNING)
        screen.show_rows([new, old])
        await pilot.pause()
        assert screen.selected_id == "new-job"
        # Later refreshes keep whatever the user selects afterwards.
        await pilot.press("down")
        screen.show_rows([new, old])
        await pilot.pause()
        assert screen.selected_id == "old-job"
        enter = screen.active_bindings["enter"].binding
        assert enter.description == "Logs"
        footer_keys = {k.key: k.description for k in screen.query_one(Footer).query(FooterKey)}
        assert footer_keys.get("enter") == "Logs"
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert ("⏎", "Logs", "jobs") in {(k.key, k.description, k.scope) for k in app.screen.keys}


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
        screen.show_rows([job_row("bad-job", FROZEN_NOW, state=JobState.FAILED, failure=failure)])
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
        assert form.query_one("#program", Input).value == "example:horovod"
        # A program of the user's own stays whatever the kind.
        form.query_one("#program", Input).value = "train.py"
        form.query_one("#kind", Select).value = "ddp"
        await pilot.pause()
        assert form.query_one("#program", Input).value == "train.py"
