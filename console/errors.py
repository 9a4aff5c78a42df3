"""One error family for everything the core raises.

Every message is written for the person at the keyboard: it says what is wrong and,
where there is one, what to do next. The UI and the CLI show ``str(error)`` as is.

Each class carries the exit status the command line gives it (``exit_status``); ``cli.main``
maps errors to statuses in one place: 2 for bad input (options, inventory, job spec),
1 for everything that went wrong while doing the work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

EXIT_OK = 0
EXIT_FAILED = 1  # a host is not up, the job failed, the work could not be done
EXIT_BAD_INPUT = 2  # an option, the inventory or the job spec is wrong: nothing was tried
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), after cleaning up


class ConsoleError(Exception):
    """Base of every error distconsole raises on purpose."""

    exit_status: ClassVar[int] = EXIT_FAILED


class UsageError(ConsoleError):
    """A command-line option or argument is wrong; ``option`` names it."""

    exit_status = EXIT_BAD_INPUT

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        self.detail = message
        super().__init__(f"{option}: {message}")


class InventoryError(ConsoleError):
    """hosts.yaml (or a host_file / MPI hostfile) is missing or invalid.

    ``str()`` is one line: ``FILE:LINE: FIELD: message``.
    """

    exit_status = EXIT_BAD_INPUT

    def __init__(
        self, message: str, *, path: str, line: int | None = None, field: str | None = None
    ) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.detail = message
        where = path if line is None else f"{path}:{line}"
        what = f"{field}: " if field else ""
        self.problems: tuple[InventoryError, ...] = (self,)
        super().__init__(f"{where}: {what}{message}")

    @classmethod
    def several(cls, problems: Sequence[InventoryError]) -> InventoryError:
        """One error for every problem of a file: the first one's fields, one line each."""
        first = problems[0]
        error = cls(first.detail, path=first.path, line=first.line, field=first.field)
        error.problems = tuple(problems)
        error.args = ("\n".join(str(p) for p in problems),)
        return error


class TransportError(ConsoleError):
    """A command could not be run on a host."""


class HostUnavailable(TransportError):
    """The host is not up (down, auth-failed, host-key-rejected, connecting)."""

    def __init__(self, host: str, state: str, reason: str) -> None:
        self.host = host
        self.state = state
        self.reason = reason
        super().__init__(f"{host} is {state}: {reason}")


class HostProgramError(TransportError):
    """A host program said something this console cannot read (wrong version, no hello)."""

    def __init__(self, host: str, program: str, message: str) -> None:
        self.host = host
        self.program = program
        super().__init__(f"{host}: {program}: {message}")


class CommandTimeout(TransportError):
    """A command did not finish within its timeout (it was killed)."""

    def __init__(self, host: str, command: str, timeout: float) -> None:
        self.host = host
        self.command = command
        self.timeout = timeout
        super().__init__(f"{host}: command did not finish within {timeout:g}s: {command}")


class JobSpecError(ConsoleError):
    """A job spec field is invalid; ``field`` names the form field / CLI option."""

    exit_status = EXIT_BAD_INPUT

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.detail = message
        super().__init__(f"{field}: {message}")


class PlanError(ConsoleError):
    """A valid spec cannot be planned on this inventory (not enough hosts, GPUs, ...)."""


class CheckReport(Protocol):
    """What a pre-flight report offers to whoever catches its error (jobs.preflight's
    ``PreflightReport``; a protocol so this bottom layer imports nothing of ours)."""

    def describe(self) -> str: ...

    def to_json(self) -> dict[str, Any]: ...


class PreflightError(ConsoleError):
    """A pre-flight check failed; the launch was not started. ``report`` holds every
    finding (failures and warnings), so a caller can show more than the message."""

    def __init__(self, message: str, report: CheckReport | None = None) -> None:
        self.report = report
        super().__init__(message)


class JobError(ConsoleError):
    """Starting, stopping or following a job failed."""


class FollowError(JobError):
    """Following a job's log files on a host failed (the follower program could not
    start, spoke another version, or its stream broke in a way resuming cannot mend)."""

    def __init__(self, host: str, message: str) -> None:
        self.host = host
        self.detail = message
        super().__init__(f"{host}: {message}")
