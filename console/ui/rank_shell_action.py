"""The console's shell key (``!`` on the jobs and logs screens): a shell on the host of a
rank, in the job's working directory with its environment (``jobs/ssh/rank_shell.py`` builds
the ``ssh -t`` command), with the terminal handed over and taken back.

The console is suspended (``App.suspend()``) while the shell runs: its event loop waits
for the shell (Textual's own pattern), so the jobs keep running on their hosts and the
console's connections resume where they were. What stands in the way (not connected,
no plan, the host down, a host key not verified) is a notification that says what to do
next; so is ssh's own failure (exit 255), with ssh's message, which ``-E`` keeps out of
the terminal the console takes back.

The runner is the screen's ``shell_runner`` attribute (:data:`ShellRunner`), so a test
can see the argv handed over without a terminal; the real command runs against real
sshd hosts in ``tests/integration/test_rank_shell.py``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textual.app import App, SuspendNotSupported
from textual.binding import Binding
from textual.screen import Screen

from console.errors import ConsoleError
from console.jobs.models import JobPlan
from console.jobs.ssh.rank_shell import (
    ShellCommand,
    ShellTarget,
    rank_place,
    rank_shell_command,
    shell_targets,
)
from console.transport.base import HostState
from console.ui.screens.choose_rank import ChooseRank, target_label
from console.ui.services import Services

# The same key on both screens, in the footer, the help and the palette.
SHELL_BINDING = Binding("exclamation_mark", "rank_shell", "Shell on rank", key_display="!")
SSH_FAILED = 255  # ssh's own exit status for "could not connect / refused"


@dataclass(frozen=True, slots=True)
class ShellResult:
    status: int
    ssh_errors: str = ""  # what ssh itself said (its -E log), shown when it failed


ShellRunner = Callable[[App[Any], ShellCommand], ShellResult]


def run_suspended(app: App[Any], command: ShellCommand) -> ShellResult:
    """Write the rank's env file on the host (its values on ssh's stdin, never in an
    argv), then run the shell on the terminal the app gives up meanwhile; ssh's own
    messages go to a temporary file (``-E``) so that they can be shown once the console
    is back. The upload runs there too: ssh may ask for a passphrase."""
    fd, log = tempfile.mkstemp(prefix="distconsole-ssh-", suffix=".log")
    os.close(fd)
    try:
        with app.suspend():
            sent = subprocess.run(
                with_error_log(command.upload, log),
                input=command.env_script,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                check=False,
            )
            if sent.returncode != 0:
                said = Path(log).read_text(errors="replace") + sent.stderr.decode(errors="replace")
                why = said.strip() or f"writing {command.env_file} there ended {sent.returncode}"
                return ShellResult(SSH_FAILED, why)
            done = subprocess.run(with_error_log(command.argv, log), check=False)
        return ShellResult(done.returncode, Path(log).read_text(errors="replace").strip())
    finally:
        Path(log).unlink(missing_ok=True)


def with_error_log(argv: Sequence[str], log: str) -> list[str]:
    """``argv`` (an ssh command) with ssh's own messages written to ``log`` (``-E``)."""
    return [argv[0], "-E", log, *argv[1:]]


def host_problem(services: Services, host: str) -> str | None:
    """Why a shell on ``host`` cannot open now, with what to do; None: try it."""
    status = services.store.statuses.get(host)
    if status is None or status.state in (HostState.UP, HostState.CONNECTING):
        return None  # not known to be unreachable: ssh will say
    why = f" ({status.reason})" if status.reason else ""
    if status.state is HostState.HOST_KEY_REJECTED:
        return f"{host}'s host key was refused{why}: check the key, fix known_hosts, then retry"
    if status.state is HostState.AUTH_FAILED:
        return f"{host} refused the login{why}: fix the user or key in the inventory, then retry"
    return f"{host} is {status.state.value}{why}: h shows the hosts; retry once it is up"


class RankShell:
    """What a screen's shell key does: choose the rank, check, hand the terminal over."""

    def __init__(self, screen: Screen[Any], services: Services, runner: ShellRunner) -> None:
        self.screen = screen
        self.services = services
        self.runner = runner

    def choose(self, plan: JobPlan, preferred: ShellTarget | None = None) -> None:
        """One rank: open it; several: ask which (``preferred`` highlighted first)."""
        targets = shell_targets(plan)
        if preferred is not None and preferred in dict(targets):
            self.open(plan, preferred)
            return
        if len(targets) <= 1:
            self.open(plan, targets[0][0] if targets else None)
            return

        def chosen(target: ShellTarget | None) -> None:
            if target is not None:
                self.open(plan, target)

        self.screen.app.push_screen(ChooseRank(plan.job_id, targets), chosen)

    def open(self, plan: JobPlan, target: ShellTarget | None) -> None:
        notify = self.screen.notify
        try:
            place = rank_place(plan, target)
            problem = host_problem(self.services, place.host)
            if problem is not None:
                notify(f"No shell on {place.host}: {problem}", severity="error", timeout=15)
                return
            command = rank_shell_command(self.services.inventory, plan, target)
        except ConsoleError as exc:
            notify(f"No shell: {exc}", severity="error", timeout=15)
            return
        what = f"{target_label(target)} of {plan.job_id}" if target is not None else plan.job_id
        try:
            result = self.runner(self.screen.app, command)
        except SuspendNotSupported:
            notify(
                "This terminal cannot hand itself over; run it yourself (without the job's "
                f"environment):\n{shlex.join(command.argv)}",
                severity="error",
                timeout=30,
            )
            return
        except OSError as exc:  # no ssh client installed
            notify(f"Could not run ssh: {exc}", severity="error", timeout=15)
            return
        if result.status == SSH_FAILED:
            said = result.ssh_errors.splitlines()[-1] if result.ssh_errors else "no message"
            notify(
                f"ssh to {place.host} failed: {said}\nCheck the host is up (h) and its key "
                f"is in known_hosts, then press ! again",
                severity="error",
                timeout=20,
            )
            return
        notify(f"Back from the shell on {place.host} ({what})", timeout=4)
