"""How a host program reaches a host: one typed object, one command line, one setup rule.

A :class:`HostProgram` is its source, its arguments and its own stdin (if it reads
one). :func:`shipment` turns it into the shell line and the stdin to send; the source
travels on stdin (read whole by :data:`STDIN_SOURCE`, run as ``python3 -u -`` would run
it) unless the program keeps stdin for itself (the job helper reads its payload there,
and stdin's EOF tells it the console went away), in which case it travels as
``-c SOURCE``.

:func:`with_setup` is the only place that joins a host's ``setup`` line to a command.
``setup`` is the user's own shell text and runs as written; it goes in a brace group
closed on a NEW line, so a trailing comment (``source venv/bin/activate  # py3.11``),
a trailing ``;`` or several lines cannot swallow or break what follows.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from console.inventory import Host
from console.transport.hello import NESTED_MARK


def shell_word(word: str) -> str:
    """Quote one word for a POSIX shell, leaving a leading ``~/`` for the shell to expand.

    ``~/a b`` -> ``"$HOME"/'a b'``; anything else is :func:`shlex.quote`. Paths on hosts
    keep ``~`` literally (the console does not know remote homes).
    """
    if word == "~":
        return '"$HOME"'
    if word.startswith("~/"):
        rest = word[2:]
        return '"$HOME"/' + shlex.quote(rest) if rest else '"$HOME"/'
    return shlex.quote(word)


def shell_join(argv: Iterable[str]) -> str:
    """Like :func:`shlex.join`, with :func:`shell_word`'s ``~/`` expansion."""
    return " ".join(shell_word(w) for w in argv)


def _group(setup: str) -> str:
    """``setup`` as one shell compound command whose status is setup's own."""
    return f"{{ {setup}\n}}"


def with_setup(
    setup: str | None,
    command: str,
    *,
    on_failure: str | None = None,
    bash: bool = False,
) -> str:
    """``command`` run after ``setup`` (no setup: ``command`` as is).

    ``on_failure`` None: a failing setup stops there and its status is the line's (the
    command never runs with a half-set environment). Otherwise ``on_failure`` (shell
    text, e.g. record status 126 and exit) runs when setup fails, then ``command``.
    ``bash``: the whole line runs under ``bash -c``, for callers whose setup lines may
    use bash-only words (``source``) while the login shell may be another sh.
    """
    if setup and setup.strip():
        group = _group(setup)
        if on_failure is None:
            line = f"{group} && {command}"
        else:
            line = f"{group} || {{ {on_failure}\n}}\n{command}"
    else:
        line = command
    if not bash:
        return line
    # The nested bash may print the login shell's greeting again: our marker follows
    # it (hello.py), as the outer shell's does.
    return shlex.join(["bash", "-c", f"{NESTED_MARK}\n{line}"])


@dataclass(frozen=True, slots=True)
class HostProgram:
    """A program for a host's Python: its name (for messages), source and arguments.

    ``stdin``: the program's own input. None: the program reads no stdin, so its source
    goes there. A string (possibly empty): the program keeps stdin, the source goes on
    the command line (``ps`` on the host shows it; keep such programs small).
    """

    name: str
    source: str
    args: tuple[str, ...] = ()
    stdin: str | None = None

    @property
    def keeps_stdin(self) -> bool:
        return self.stdin is not None


@dataclass(frozen=True, slots=True)
class Shipment:
    """What to send: the shell line, and the text to write to its stdin (then EOF)."""

    command: str
    stdin: str


# Runs the source sent on stdin as ``python3 -`` would (same ``sys.argv``, ``__name__``
# and file name in tracebacks), but reads it in one go: ``python3 -`` reads its program
# from a pipe one byte per read(2), 73,000 system calls and ~55 ms of CPU for the
# sampler's 72 KB on every host at every start (bench/gpus_cli.py).
STDIN_SOURCE = 'import sys;sys.argv[0]="-";exec(compile(sys.stdin.buffer.read(),"<stdin>","exec"))'


def python_command(python: str, program: HostProgram) -> str:
    """The quoted command line that runs ``program`` with ``python`` (``~/`` expands)."""
    source = program.source if program.keeps_stdin else STDIN_SOURCE
    words = ["-u", "-c", source, *program.args]
    return shell_word(python) + " " + shlex.join(words)


def shipment(
    host: Host,
    program: HostProgram,
    *,
    setup: bool = True,
    exec_: bool = False,
    bash: bool = False,
) -> Shipment:
    """The command line and stdin that run ``program`` with ``host``'s Python.

    ``setup``: run the host's setup line first (the Python that jobs use is then the one
    asked). ``exec_``: the interpreter replaces the shell, so its parent is the ssh
    session itself and a program that watches its parent notices the session ending.
    """
    command = python_command(host.python, program)
    if exec_:
        command = "exec " + command
    line = with_setup(host.setup if setup else None, command, bash=bash)
    stdin = program.stdin if program.stdin is not None else program.source
    return Shipment(line, stdin)
