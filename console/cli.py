"""Command line entry point: ``distconsole HOSTS`` opens the console; sub-commands script it.

Each sub-command lives in ``console/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable
``(args) -> int`` (the exit status). Only the command being run is imported and
registered (its module pulls in asyncssh, pydantic, ...: about 0.4 s of CPU for all of
them); the others get a one-line entry for ``distconsole --help`` from ``COMMANDS``.
Errors are mapped to exit statuses here and only here, by the status each error class
carries (console/errors.py): 2 bad input, 1 failed, 130 interrupted.
Output piped into a reader that goes away (``| head``) ends quietly.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from console import __version__
from console.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK, ConsoleError

# name -> the one-line help its register() gives (tests/unit/test_cli_lazy.py holds the
# two equal); the order is the order of `distconsole --help`.
COMMANDS: dict[str, str] = {
    "check": "connect to every host and show its state, OS, Python, torch, GPUs, disk",
    "gpus": "show every GPU of every host (utilization, memory, power, processes, job/rank)",
    "health": "show every GPU's health verdict (ok / warn / fail) with its reasons and since when",
    "validate": "measure every host, GPU and link (compute, memory, all-reduce) and judge them",
    "plan": "show the exact per-host commands, environment and log files of a job",
    "launch": "start a job on its hosts and stream its output until it ends",
    "export": "write the job as Kubeflow manifests or a Slurm batch script",
    "jobs": "list the jobs started on these hosts (re-attaching to running ones)",
    "stop": "stop a job on every host (SIGTERM, then SIGKILL) and check nothing remains",
    "logs": "print every rank's log lines of a job (rank-prefixed; --follow for live)",
    "report": "write a job's post-mortem bundle (summary, plan, commands, timeline, logs)",
    "keys": "let every host SSH to every other by name (keys, known_hosts, ~/.ssh/config)",
    "demo": "run an embedded demo cluster (SSH servers on loopback) and open the console on it",
    "ui": "open the console on an inventory (also: distconsole HOSTS)",
    "metrics": "serve every GPU's and job's figures to Prometheus (dcgm-exporter's names)",
    "forward": "forward a local port to a port on a host, over the host's SSH connection",
    "gc": "free every host of ended jobs' directories and Ray temp dirs (--sync: old sync trees)",
    "sync-gc": "remove old --sync trees and the objects only they used, on every host",
}

# Commands another command's module registers: name -> (module, its register function).
ALIASES: dict[str, tuple[str, str]] = {"sync-gc": ("gc", "register_sync_gc")}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser tree with ``command`` registered in full (every one when None)."""
    parser = argparse.ArgumentParser(
        prog="distconsole",
        description="Keyboard-driven console for multi-node GPU training clusters. "
        "`distconsole HOSTS.yaml` opens the console; the sub-commands script it.",
    )
    parser.add_argument("--version", action="version", version=f"distconsole {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, summary in COMMANDS.items():
        if command is None or name == command:
            module_name, function = ALIASES.get(name, (name.replace("-", "_"), "register"))
            module = importlib.import_module(f"console.commands.{module_name}")
            getattr(module, function)(sub)
        else:
            # Never parsed: argv names one command, and only that one is registered.
            sub.add_parser(name, help=summary, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    # `distconsole hosts.yaml [options]` is short for `distconsole ui hosts.yaml [options]`.
    if args_list and not args_list[0].startswith("-") and args_list[0] not in COMMANDS:
        if not _names_a_file(args_list[0]):
            return _unknown_command(args_list[0])
        args_list.insert(0, "ui")
    command = args_list[0] if args_list and args_list[0] in COMMANDS else ""
    parser = build_parser(command)
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


def _names_a_file(word: str) -> bool:
    """Whether ``word`` is read as an inventory file: one that exists, or a name that can
    only be a path (``hosts.yaml``, ``~/c/hosts``); a missing one is then "file not found".
    A bare word naming nothing (``gpu``, ``lauch``) is a mistyped command."""
    return os.path.exists(word) or os.sep in word or "." in word


def _unknown_command(word: str) -> int:
    """``distconsole gpu``: no such command and no such file; exit 2 naming the likely one."""
    from console.validation import did_you_mean  # pydantic: only on this path

    guess = did_you_mean(word, COMMANDS)
    hint = f"did you mean {guess!r}?" if guess else f"commands: {', '.join(COMMANDS)}"
    print(
        f"distconsole: unknown command {word!r}; {hint}\n"
        f"(no file named {word!r} either: `distconsole HOSTS.yaml` opens the console on an "
        "inventory; `distconsole --help` lists the commands)",
        file=sys.stderr,
    )
    return EXIT_BAD_INPUT


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
