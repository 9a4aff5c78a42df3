"""``distconsole sync-gc HOSTS [--keep N] [--dry-run]``: free the hosts' sync stores.

Every ``--sync`` of a changed tree leaves a new tree (``~/.cache/distconsole/sync/
trees/NAME-ID``) and new objects on each host. This keeps each name's last N synced
trees (default 3; reusing a tree counts as syncing it) and every tree a process works
in, removes the others (``--name``: only that synced directory's) and every object no
kept tree links to (none stored within the last hour: a sync may be linking it), and
prints per host what it freed (``--dry-run``: what it would). Exit 0, 1 when a host could not be
cleaned, 2 for bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from console import inventory as inventory_module
from console.commands import options
from console.display import byte_size
from console.inventory import Host
from console.jobs.sync.gc import DEFAULT_KEEP, HostGc, gc_hosts
from console.transport.pool import ClusterConnections


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "sync-gc",
        help="remove old --sync trees and the objects only they used, on every host",
        description=__doc__,
    )
    options.add_inventory(parser)
    options.add_host_selection(parser)
    parser.add_argument(
        "--keep",
        type=options.whole_number,
        default=DEFAULT_KEEP,
        metavar="N",
        help=f"synced trees kept per name, the most recent (default {DEFAULT_KEEP})",
    )
    parser.add_argument(
        "--name",
        dest="tree_names",
        action="append",
        metavar="NAME",
        help="only the trees of this synced directory's name (repeatable; default: all)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would be removed; remove nothing"
    )
    parser.set_defaults(func=run)


def host_lines(done: HostGc) -> list[str]:
    verb = "would free" if done.dry_run else "freed"
    trees = f"{len(done.removed)} tree(s)" if done.removed else "no tree"
    head = (
        f"{done.host}: {verb} {byte_size(done.bytes_freed)}: {trees}, "
        f"{done.objects} object(s); kept {len(done.kept)} tree(s)"
    )
    if done.busy:
        head += f" ({len(done.busy)} in use: {', '.join(done.busy)})"
    lines = [head]
    lines += [f"  {'would remove' if done.dry_run else 'removed'} {t}" for t in done.removed]
    if done.stale:
        lines.append(f"  {done.stale} half-built tree(s) of syncs that died")
    return lines


async def sync_gc(
    hosts: Sequence[Host], *, keep: int, dry_run: bool, tree_names: Sequence[str] | None
) -> int:
    status = 0
    async with ClusterConnections(hosts) as pool:
        await pool.wait_settled()
        outcomes = await gc_hosts(
            pool, [h.name for h in hosts], keep=keep, dry_run=dry_run, tree_names=tree_names
        )
    for outcome in outcomes.values():
        if isinstance(outcome, str):
            print(f"distconsole sync-gc: {outcome}", file=sys.stderr)
            status = 1
            continue
        print("\n".join(host_lines(outcome)))
    return status


def run(args: argparse.Namespace) -> int:
    inventory = inventory_module.load(args.inventory)
    hosts = options.selected_hosts(inventory, args.names, args.tags)
    return asyncio.run(
        sync_gc(hosts, keep=args.keep, dry_run=args.dry_run, tree_names=args.tree_names)
    )
