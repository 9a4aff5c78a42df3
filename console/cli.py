"""Command line entry point: ``distconsole HOSTS`` opens the console; sub-commands script it.

Each sub-command lives in ``console/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable
``(args) -> int`` (the exit status). Exit status 2 means bad input (usage, inventory).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from console import __version__
from console.errors import ConsoleError, InventoryError

COMMANDS = ("check", "gpus", "plan", "launch", "jobs", "stop", "logs", "demo", "ui")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="distconsole",
        description="Keyboard-driven console for multi-node GPU training clusters. "
        "`distconsole HOSTS.yaml` opens the console; the sub-commands script it.",
    )
    parser.add_argument("--version", action="version", version=f"distconsole {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"console.commands.{name}")
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
        return 2
    try:
        status: int = args.func(args)
    except InventoryError as exc:
        print(f"distconsole: {exc}", file=sys.stderr)
        return 2
    except ConsoleError as exc:
        print(f"distconsole: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())
