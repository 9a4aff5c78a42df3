"""`distconsole ui HOSTS [--theme T]` (also plain `distconsole HOSTS`): open the console."""

from __future__ import annotations

import argparse
from typing import Any

from console.commands.metrics import listen_arg
from console.commands.parts import options


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "ui",
        help="open the console on an inventory (also: distconsole HOSTS)",
        description="Open the keyboard-driven console on the hosts of an inventory file.",
    )
    options.add_inventory(parser)
    parser.add_argument(
        "--theme",
        default=None,
        help="colour theme (default distconsole-dark; also distconsole-light or any "
        "Textual theme; switch later from the command palette)",
    )
    parser.add_argument(
        "--metrics-listen",
        type=listen_arg,
        default=None,
        metavar="ADDR:PORT",
        help="also serve Prometheus metrics there (as `distconsole metrics`; PORT alone: "
        "on 127.0.0.1)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Textual loads only here, so the other sub-commands never import it.
    from console.ui.app import run as run_app

    return run_app(args.inventory, theme=args.theme, metrics_listen=args.metrics_listen)
