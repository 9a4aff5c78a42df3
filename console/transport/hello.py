"""The versioned record every host program writes first, and the console's check of it.

Each program's output opens with a hello, ``{"program": NAME, "v": VERSION}`` (a JSON
line; the log follower's first ``J`` frame; the facts line's marker prefix), so a
console never reads a record it does not understand as if it did: an older or newer
program on a host (say, a supervisor started by another console) is refused with a
message naming the host and the program instead of a panel of wrong figures.

Each program file declares its ``PROGRAM`` name and ``VERSION``; the console imports
those same constants to check the hello, so one file says what both ends expect.

Before any of that, a command's output over SSH starts at a marker of its own
(:func:`marked`, :class:`OutputStart`): what the login shell printed first is skipped.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from console.errors import HostProgramError

__all__ = [
    "MARK_PREFIX",
    "HostProgramError",
    "OutputStart",
    "check_hello",
    "hello",
    "is_hello",
    "marked",
    "marker_of",
    "marks_in",
    "new_marker",
    "unmarked",
]

# Where our output starts. sshd runs every command through the user's login shell,
# whose rc files (~/.bashrc) may print a greeting, escape codes included, before the
# command runs: a hello can't be found behind it, a binary frame stream breaks (`logs`
# looped "disconnected / resumed"), a JSON reply fails (`report` wrote an empty host).
# So each command over SSH first prints a random marker of its own (the shell prints it,
# after the rc files and before anything of ours), and its reader skips to it.
# A ``bash -c`` inside the command (ship.with_setup(bash=True)) may source the rc files
# again (bash does when it was exec'd as the ssh command's last word): it prints the
# marker again (NESTED_MARK, from the variable), and the reader skips to the last one.
MARK_PREFIX = "distconsole-output-"
MARK_VAR = "DISTCONSOLE_OUTPUT_MARK"
# Printed once, then unset: what the nested command starts never carries it.
NESTED_MARK = (
    f'[ -z "${{{MARK_VAR}-}}" ] || {{ printf \'%s\\n\' "${MARK_VAR}"; unset {MARK_VAR}; }}'
)
_NESTED = f"${{{MARK_VAR}-}}"
_MARKED = re.compile(
    f"(?:export {MARK_VAR}=[0-9a-z-]+; )?printf '%s\\\\n' ({MARK_PREFIX}[0-9a-f]{{16}}); "
)
HOLD_LIMIT = 1 << 20  # bytes held waiting for the marker; more: it is not coming


def new_marker() -> str:
    """A marker no greeting can hold by chance (64 random bits)."""
    return MARK_PREFIX + secrets.token_hex(8)


def marked(line: str, marker: str) -> str:
    """The shell ``line`` that prints ``marker`` on a line of its own first (and from
    each ``bash -c`` of ours inside it: :data:`NESTED_MARK`)."""
    # Plain words (any login shell runs them); the variable only for a nested bash.
    exported = f"export {MARK_VAR}={marker}; " if _NESTED in line else ""
    return f"{exported}printf '%s\\n' {marker}; {line}"


def marker_of(line: str) -> str | None:
    """The marker a :func:`marked` line prints first (None: not a marked line)."""
    m = _MARKED.match(line)
    return m[1] if m else None


def unmarked(line: str) -> str:
    """A :func:`marked` line's own command (``line`` itself when not marked)."""
    m = _MARKED.match(line)
    return line[m.end() :] if m else line


def marks_in(line: str) -> int:
    """How many times a :func:`marked` ``line`` prints its marker (1 + its nested ones)."""
    return 1 + line.count(_NESTED)


class OutputStart:
    """Drops what a command's stdout holds before its last marker (``expected`` of them:
    :func:`marks_in`), the markers' lines included.

    Output that does not show them all (a forced command, a nested shell that never
    ran) is passed on from its last marker, or whole if none, once it ends or passes
    :data:`HOLD_LIMIT`.
    """

    def __init__(self, marker: str, expected: int = 1) -> None:
        self.marker = marker.encode() + b"\n"
        self.expected = expected
        self.held = b""
        self.found = False

    def feed(self, data: bytes) -> bytes:
        """What of ``data`` is the command's own output (b"": still before the marker)."""
        if self.found:
            return data
        self.held += data
        while self.expected and (at := self.held.find(self.marker)) >= 0:
            self.held = self.held[at + len(self.marker) :]
            self.expected -= 1
        if not self.expected:
            return self.end()
        if len(self.held) > HOLD_LIMIT:
            return self.end()
        return b""

    def end(self) -> bytes:
        """What was held (after the last marker seen): the stream ended, or it is all."""
        self.found = True
        rest, self.held = self.held, b""
        return rest

    def text(self, output: str) -> str:
        """A whole output, already decoded: what follows the last marker (all if none)."""
        marker = self.marker.decode()
        at = output.rfind(marker)
        return output if at < 0 else output[at + len(marker) :]


def hello(program: str, version: int) -> dict[str, Any]:
    return {"program": program, "v": version}


def is_hello(record: object) -> bool:
    return isinstance(record, dict) and "program" in record and "v" in record


def check_hello(host: str, program: str, version: int, record: object) -> None:
    """Raise :class:`HostProgramError` unless ``record`` is ``program``'s hello at ``version``."""
    if not is_hello(record):
        shown = repr(record)[:200]
        raise HostProgramError(
            host,
            program,
            f"the program did not open with its versioned hello (got {shown}); "
            "it is not the program this console sent, or an older one",
        )
    assert isinstance(record, dict)
    if record.get("program") != program:
        raise HostProgramError(
            host, program, f"expected the {program} program, {record.get('program')!r} answered"
        )
    if record.get("v") != version:
        raise HostProgramError(
            host,
            program,
            f"speaks wire version {record.get('v')!r}, this console reads version {version}; "
            "run the same distconsole version on every console that talks to this host",
        )
