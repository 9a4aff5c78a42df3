"""`distconsole launch` (placeholder until its issue lands: exits 2 saying so)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser("launch", help="(not yet available)")
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print("distconsole launch: not available yet in this build", file=sys.stderr)
    return 2
