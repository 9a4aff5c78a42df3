"""One error family for everything the core raises.

Every message is written for the person at the keyboard: it says what is wrong and,
where there is one, what to do next. The UI and the CLI show ``str(error)`` as is.
"""

from __future__ import annotations


class ConsoleError(Exception):
    """Base of every error distconsole raises on purpose."""


class InventoryError(ConsoleError):
    """hosts.yaml (or a host_file / MPI hostfile) is missing or invalid.

    ``str()`` is one line: ``FILE:LINE: FIELD: message``.
    """

    def __init__(
        self, message: str, *, path: str, line: int | None = None, field: str | None = None
    ) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.detail = message
        where = path if line is None else f"{path}:{line}"
        what = f"{field}: " if field else ""
        super().__init__(f"{where}: {what}{message}")


class TransportError(ConsoleError):
    """A command could not be run on a host."""


class HostUnavailable(TransportError):
    """The host is not up (down, auth-failed, host-key-rejected, connecting)."""

    def __init__(self, host: str, state: str, reason: str) -> None:
        self.host = host
        self.state = state
        self.reason = reason
        super().__init__(f"{host} is {state}: {reason}")


class CommandTimeout(TransportError):
    """A command did not finish within its timeout (it was killed)."""

    def __init__(self, host: str, command: str, timeout: float) -> None:
        self.host = host
        self.command = command
        self.timeout = timeout
        super().__init__(f"{host}: command did not finish within {timeout:g}s: {command}")


class JobSpecError(ConsoleError):
    """A job spec field is invalid; ``field`` names the form field / CLI option."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.detail = message
        super().__init__(f"{field}: {message}")


class PlanError(ConsoleError):
    """A valid spec cannot be planned on this inventory (not enough hosts, GPUs, ...)."""


class PreflightError(ConsoleError):
    """A pre-flight check failed; the launch was not started."""


class JobError(ConsoleError):
    """Starting, stopping or following a job failed."""
