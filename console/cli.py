"""Command line entry point: ``distconsole HOSTS`` opens the console; sub-commands script it.

Each sub-command lives in ``console/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable
``(args) -> int`` (the exit status). Errors are mapped to exit statuses here and only
here, by the status each error class carries (console/errors.py): 2 bad input, 1 failed,
130 interrupted. Output piped into a reader that goes away (``| head``) ends quietly.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from console import __version__
from console.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK, ConsoleError

COMMANDS = (
    "check", "gpus", "plan", "launch", "export", "jobs", "stop", "logs", "report", "keys", "demo",
    "ui", "sync-gc",
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="distconsole",
        description="Keyboard-driven console for multi-node GPU training clusters. "
        "`distconsole HOSTS.yaml` opens the console; the sub-commands script it.",
    )
    parser.add_argument("--version", action="version", version=f"distconsole {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"console.commands.{name.replace('-', '_')}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    # `distconsole hosts.yaml [options]` is short for `distconsole ui hosts.yaml [options]`.
    if args_list and not args_list[0].startswith("-") and args_list[0] not in COMMANDS:
        args_list.insert(0, "ui")
    parser = build_parser()
    args = parser.parse_args(args_list)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    try:
        status: int = args.func(args)
        sys.stdout.flush()
    except ConsoleError as exc:
        print(f"distconsole {args.command}: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _reader_went_away()
    return status


def _reader_went_away() -> int:
    """``distconsole jobs | head``: the reader closed the pipe; say nothing more.

    Python would print a BrokenPipeError (and another one at exit, flushing stdout);
    pointing stdout at /dev/null lets the interpreter close quietly.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_OK  # the reader chose to stop reading; nothing of ours failed


if __name__ == "__main__":
    sys.exit(main())
