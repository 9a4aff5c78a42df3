"""The versioned record every host program writes first, and the console's check of it.

Each program's output opens with a hello, ``{"program": NAME, "v": VERSION}`` (a JSON
line; the log follower's first ``J`` frame; the facts line's marker prefix), so a
console never reads a record it does not understand as if it did: an older or newer
program on a host (say, a supervisor started by another console) is refused with a
message naming the host and the program instead of a panel of wrong figures.

Each program file declares its ``PROGRAM`` name and ``VERSION``; the console imports
those same constants to check the hello, so one file says what both ends expect.
"""

from __future__ import annotations

from typing import Any

from console.errors import HostProgramError

__all__ = ["HostProgramError", "check_hello", "hello", "is_hello"]


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
