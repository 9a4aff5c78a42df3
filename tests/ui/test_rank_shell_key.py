"""The shell key (``!``) on the jobs and logs screens, with Pilot: bound, in the footer,
the help and the palette; what it says when it cannot open a shell; and the argv it
hands the terminal to, which must be the one ``jobs/ssh/rank_shell.py`` builds for the rank
chosen. The terminal hand-over is the screens' ``shell_runner`` seam (a recorder here:
there is no terminal under Pilot); the real ssh command runs against real sshd hosts
in tests/integration/test_rank_shell.py, and Pilot's headless driver shows the real
runner's answer to a terminal that cannot be handed over."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Footer, OptionList
from textual.widgets._footer import FooterKey
from ui_fixtures import FROZEN_NOW

from console.inventory import Host, Inventory
from console.jobs.history import JobHistory
from console.jobs.models import JobPlan, JobState
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.jobs.ssh.rank_shell import (
    ShellCommand,
    rank_shell_argv,
    rank_shell_command,
    shell_targets,
)
from console.transport.base import HostState, HostStatus
from console.transport.pool import ClusterConnections
from console.ui.app import DistConsoleApp
from console.ui.jobs_service import JobRow, JobsService
from console.ui.rank_shell_action import ShellResult
from console.ui.screens.choose_rank import ChooseRank
from console.ui.screens.help import HelpScreen
from console.ui.screens.jobs import JobsScreen
from console.ui.screens.logs import LogsScreen

INVENTORY = Inventory(
    path="/srv/shell/hosts.yaml",
    hosts=(
        Host(name="node0", address="10.0.0.10", user="alice", port=2022, gpus=2,
             known_hosts="/srv/shell/known_hosts"),
        Host(name="node1", address="10.0.0.11", user="bob", gpus=2,
             identity_file="/srv/shell/id_bob", known_hosts="/srv/shell/known_hosts"),
        Host(name="node2", address="10.0.0.12", gpus=2, insecure_host_keys=True),
    ),
)  # fmt: skip
MPI_PLAN = plan(
    make_spec(kind="mpi", program="train.py", hosts=("node0", "node1"), env={"LR": "0.1"}),
    INVENTORY,
    job_id="mpi-shell",
)


class Recorder:
    """The terminal hand-over, recorded: what the console would run, and its answer."""

    def __init__(self, result: ShellResult | None = None) -> None:
        self.argvs: list[list[str]] = []
        self.commands: list[ShellCommand] = []
        self.result = result or ShellResult(0)

    def __call__(self, app: App[Any], command: ShellCommand) -> ShellResult:
        self.argvs.append(list(command.argv))
        self.commands.append(command)
        return self.result


def make_app() -> DistConsoleApp:
    return DistConsoleApp(INVENTORY, connections_factory=None, clock=lambda: FROZEN_NOW)


def notes(app: DistConsoleApp) -> list[str]:
    return [str(n.message) for n in app._notifications]


def row_of(job: JobPlan) -> JobRow:
    hosts = tuple(dict.fromkeys(launch.host for launch in job.launches))
    return JobRow(job.job_id, job.name, job.kind.value, JobState.RUNNING, FROZEN_NOW - 5,
                  None, hosts, job.world_size, "")  # fmt: skip


async def jobs_screen_with(pilot: Pilot[Any], app: DistConsoleApp, tmp_path: Path) -> JobsScreen:
    """The jobs screen listing MPI_PLAN's job; the console reads its plan from the history."""
    history = stored_history(tmp_path)
    # Never started: the plan comes from the history, nothing connects.
    app.services.jobs = JobsService(ClusterConnections(INVENTORY), INVENTORY, history=history)
    await pilot.press("j")
    app.apply_job_rows([row_of(MPI_PLAN)])
    await pilot.pause()
    assert isinstance(app.screen, JobsScreen)
    return app.screen


def stored_history(tmp_path: Path) -> JobHistory:
    history = JobHistory(tmp_path / "jobs.sqlite3")
    history.add(MPI_PLAN, inventory=INVENTORY.path, started=FROZEN_NOW - 5)
    return history


def stored_plan(tmp_path: Path) -> JobPlan:
    """The plan as the console has it: read back from the history file."""
    return JobHistory(tmp_path / "jobs.sqlite3").get(MPI_PLAN.job_id).plan


async def wait_for(pilot: Pilot[Any], done: Any) -> None:
    """Pause until ``done()`` (a worker reads the history in a thread)."""
    for _ in range(200):
        if done():
            await pilot.pause()  # and what it showed is mounted
            return
        await pilot.pause(0.02)
    assert done()


async def logs_screen(
    pilot: Pilot[Any], app: DistConsoleApp, job: JobPlan, runner: Recorder | None = None
) -> LogsScreen:
    """The logs screen of ``job`` (no hosts followed), its shell runner ``runner``."""
    logs = LogsScreen(job, app.services, follow_hosts=False)
    if runner is not None:
        logs.shell_runner = runner
    await app.push_screen(logs)
    await pilot.pause()
    return logs


async def test_the_key_is_in_the_footers_the_help_and_the_palette(tmp_path: Path) -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await jobs_screen_with(pilot, app, tmp_path)
        keys = {k.key: k.description for k in app.screen.query_one(Footer).query(FooterKey)}
        assert keys.get("exclamation_mark") == "Shell on rank"
        logs = await logs_screen(pilot, app, MPI_PLAN)
        keys = {k.key: k.description for k in logs.query_one(Footer).query(FooterKey)}
        assert keys.get("exclamation_mark") == "Shell on rank"
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert "Shell on a rank of the selected job" in titles
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        listed = {(k.scope.split(" (")[0], k.key, k.description) for k in app.screen.keys}
        assert ("Logs of a job", "!", "Shell on rank") in listed
        assert ("Jobs screen", "!", "Shell on rank") in listed


async def test_with_no_job_selected_it_says_so() -> None:
    app = make_app()
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.press("j", "exclamation_mark")
        await pilot.pause()
        assert any("No job selected" in n for n in notes(app)), notes(app)
        assert isinstance(app.screen, JobsScreen)  # no chooser, nothing run


async def test_jobs_screen_hands_over_the_argv_rank_shell_builds(tmp_path: Path) -> None:
    app = make_app()
    async with app.run_test(size=(140, 30)) as pilot:
        screen = await jobs_screen_with(pilot, app, tmp_path)
        runner = Recorder()
        screen.shell_runner = runner
        await pilot.press("exclamation_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, ChooseRank))
        choice = app.screen.query_one(OptionList)
        # Every rank with the host it runs on: 2 GPUs per host, ranks 2 and 3 on node1.
        options = [str(choice.get_option_at_index(i).prompt) for i in range(choice.option_count)]
        assert options == ["rank 0  on node0", "rank 1  on node0", "rank 2  on node1",
                           "rank 3  on node1"]  # fmt: skip
        await pilot.press("down", "down", "enter")
        await wait_for(pilot, lambda: runner.argvs)
        assert runner.argvs == [rank_shell_argv(INVENTORY, stored_plan(tmp_path), 2)]
        argv = runner.argvs[0]
        assert argv[argv.index("--") + 1] == "10.0.0.11" and argv[argv.index("-l") + 1] == "bob"
        # The rank's env goes on the upload's stdin, never in the shell's argv.
        sent = runner.commands[0].env_script.decode()
        assert "DISTCONSOLE_RANK=2" in sent and "LR=0.1" in sent
        assert "LR=0.1" not in " ".join(argv) and "LR=0.1" not in " ".join(
            runner.commands[0].upload
        )
        assert isinstance(app.screen, JobsScreen)
        assert any("Back from the shell on node1 (rank 2 of mpi-shell)" in n for n in notes(app))


async def test_the_palette_command_reaches_the_jobs_screens_key(tmp_path: Path) -> None:
    app = make_app()
    async with app.run_test(size=(140, 30)) as pilot:
        screen = await jobs_screen_with(pilot, app, tmp_path)
        screen.shell_runner = runner = Recorder()
        await pilot.press("h")
        command = next(
            c for c in app.get_system_commands(app.screen) if c.title.startswith("Shell on a")
        )
        command.callback()
        await wait_for(pilot, lambda: isinstance(app.screen, ChooseRank))
        assert app.current_mode == "jobs"
        await pilot.press("enter")  # the first rank, highlighted
        await wait_for(pilot, lambda: runner.argvs)
        assert runner.argvs == [rank_shell_argv(INVENTORY, stored_plan(tmp_path), 0)]


async def test_logs_screen_opens_the_rank_the_view_is_narrowed_to() -> None:
    app = make_app()
    async with app.run_test(size=(140, 30)) as pilot:
        runner = Recorder()
        logs = await logs_screen(pilot, app, MPI_PLAN, runner)
        logs.ranks = [3]  # what the rank chooser (r) leaves when one rank is ticked
        await pilot.press("exclamation_mark")
        await pilot.pause()
        assert runner.argvs == [rank_shell_argv(INVENTORY, MPI_PLAN, 3)]
        # Every rank shown: the chooser asks which; Esc runs nothing.
        logs.ranks = None
        await pilot.press("exclamation_mark")
        await pilot.pause()
        assert isinstance(app.screen, ChooseRank)
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is logs and len(runner.argvs) == 1


async def test_what_stands_in_the_way_is_said_with_what_to_do() -> None:
    app = make_app()
    async with app.run_test(size=(140, 30)) as pilot:
        runner = Recorder(ShellResult(255, "Host key verification failed."))
        logs = await logs_screen(pilot, app, MPI_PLAN, runner)
        down = HostStatus("node1", HostState.DOWN, reason="connection refused", since=FROZEN_NOW)
        app.apply_statuses([down])
        logs.ranks = [2]
        await pilot.press("exclamation_mark")
        await pilot.pause()
        assert runner.argvs == []
        assert any(
            "node1 is down (connection refused): h shows the hosts" in n for n in notes(app)
        ), notes(app)
        # ssh's own failure (exit 255): its message, and what to check.
        logs.ranks = [0]
        await pilot.press("exclamation_mark")
        await pilot.pause()
        assert len(runner.argvs) == 1
        assert any(
            "ssh to node0 failed: Host key verification failed." in n and "press ! again" in n
            for n in notes(app)
        ), notes(app)


async def test_a_host_without_verified_keys_gets_no_shell() -> None:
    insecure = plan(
        make_spec(kind="ddp", program="train.py", hosts=("node2",)), INVENTORY, job_id="ddp-2"
    )
    assert [t for t, _ in shell_targets(insecure)] == [0, 1]  # torchrun's ranks
    app = make_app()
    async with app.run_test(size=(140, 30)) as pilot:
        runner = Recorder()
        logs = await logs_screen(pilot, app, insecure, runner)
        logs.ranks = [1]
        await pilot.press("exclamation_mark")
        await pilot.pause()
        assert runner.argvs == []
        assert any("insecure_host_keys" in n and "known_hosts" in n for n in notes(app))


async def test_a_terminal_that_cannot_be_handed_over_gets_the_command_to_run() -> None:
    # The real runner under Pilot's headless driver, which cannot suspend: the console
    # says so and gives the command instead of failing.
    app = make_app()
    async with app.run_test(size=(140, 30)) as pilot:
        logs = await logs_screen(pilot, app, MPI_PLAN)
        logs.ranks = [1]
        await pilot.press("exclamation_mark")
        await pilot.pause()
        said = [n for n in notes(app) if "cannot hand itself over" in n]
        assert said and "ssh -t" in said[0] and "10.0.0.10" in said[0], notes(app)


def test_the_chooser_offers_every_rank_else_every_task_on_its_host() -> None:
    ps = plan(
        make_spec(kind="ps", program="train.py", hosts=("node0", "node1"), ps=1, workers=2),
        INVENTORY,
        job_id="ps-1",
    )
    targets = shell_targets(ps)
    assert {t for t, _ in targets} == {"ps0", "worker0", "worker1"}
    for target, host in targets:
        argv = rank_shell_argv(INVENTORY, ps, target)
        assert argv[argv.index("--") + 1] == INVENTORY.get(host).address
    # One host, torchrun: every rank runs on it (no file of its own per rank).
    one = plan(make_spec(kind="ddp", program="t.py", hosts=("node1",)), INVENTORY, job_id="d")
    assert shell_targets(one) == [(0, "node1"), (1, "node1")]
    # The job's ~/ paths as its wrapper exports them: expanded on the host.
    command = rank_shell_command(INVENTORY, one, 1).env_script.decode()
    assert 'export DISTCONSOLE_HANG_HOOK="$HOME"/distconsole/' in command
