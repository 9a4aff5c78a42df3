"""Options every sub-command shares, defined once: the inventory argument, host
selection, JSON output, seconds, grace and job ids.

Value checks are argparse ``type=`` callables, so a bad value is refused by argparse
with the option's name and exit status 2 before any work starts.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

from console.errors import UsageError
from console.inventory import Host, Inventory
from console.names import job_id_problem

INVENTORY_DEST = "inventory"
INVENTORY_HELP = "hosts.yaml, a pssh host_file or an Open MPI hostfile"
MAX_GRACE_S = 3600.0


def add_inventory(parser: argparse.ArgumentParser) -> None:
    """The positional ``HOSTS`` argument; every command reads it as ``args.inventory``."""
    parser.add_argument(INVENTORY_DEST, metavar="HOSTS", help=INVENTORY_HELP)


def add_json(parser: argparse.ArgumentParser, what: str = "print JSON") -> None:
    parser.add_argument("--json", action="store_true", help=what)


def add_host_selection(parser: argparse.ArgumentParser, verb: str = "only") -> None:
    """``--host NAME[,NAME...]`` (repeatable) and ``--tag T`` (repeatable)."""
    parser.add_argument(
        "--host",
        dest="names",
        action="append",
        default=None,
        metavar="NAME[,NAME...]",
        help=f"{verb} these hosts (repeatable)",
    )
    parser.add_argument(
        "--tag", dest="tags", action="append", default=None, help=f"{verb} hosts with a tag"
    )


def selected_hosts(
    inventory: Inventory, names: Sequence[str] | None, tags: Sequence[str] | None
) -> tuple[Host, ...]:
    """The hosts ``--host``/``--tag`` chose; an unknown name (InventoryError) or an empty
    choice is bad input (exit 2)."""
    wanted = [n.strip() for item in names or () for n in item.split(",") if n.strip()]
    chosen = inventory.select(names=wanted or None, tags=tags)
    if not chosen:
        known = ", ".join(inventory.tags) or "none"
        raise UsageError("--tag", f"no host has tag {', '.join(tags or ())} (tags: {known})")
    return chosen


def whole_number(text: str) -> int:
    """An argparse type: a whole number >= 0 (``--rank``, ``--keep``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def seconds(text: str) -> float:
    """``type=`` for a duration that must be > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


def grace_seconds(text: str) -> float:
    """``type=`` for ``--grace``: seconds between SIGTERM and SIGKILL, 0 included."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value <= MAX_GRACE_S:
        raise argparse.ArgumentTypeError(f"must be 0..{MAX_GRACE_S:g} seconds, got {text}")
    return value


def add_grace(parser: argparse.ArgumentParser, default: float, when: str = "stopping") -> None:
    parser.add_argument(
        "--grace",
        type=grace_seconds,
        default=default,
        metavar="S",
        help=f"seconds between SIGTERM and SIGKILL when {when} (default {default:g})",
    )


def job_id(text: str) -> str:
    """``type=`` for ``JOB_ID``."""
    problem = job_id_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(
            f"{problem} (letters, digits, '.', '_', '-'; as `distconsole jobs` shows it)"
        )
    return text


def add_job_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "job_id", metavar="JOB_ID", type=job_id, help="the job's id, as launch or jobs prints it"
    )
