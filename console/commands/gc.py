"""``distconsole gc HOSTS [--older-than DURATION] [--keep N] [--dry-run] [--json]``: free
the hosts of ended jobs.

Every job leaves its directory (logs, hang captures, wrappers) on each of its hosts, and
a Ray job its temp dir (/tmp/dcray-*). This removes those of jobs that ended more than
DURATION ago (30d, 12h, 90m, 0s; default 30d), except the N that ended last (--keep,
default 0), and never a job whose processes still run; it prints per host what it freed
(--dry-run: what it would). ``gc --sync`` frees the hosts' --sync stores instead (the
old ``sync-gc``, still there as an alias): each synced directory's last N trees stay
(default 3) and every tree a process works in. Exit 0, 1 when a host could not be
cleaned, 2 for bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Sequence
from typing import Any

from console import inventory as inventory_module
from console.commands.parts import options
from console.display import byte_size
from console.errors import UsageError
from console.inventory import Host
from console.jobs.ssh.gc import DEFAULT_OLDER_THAN_S, HostJobsGc, gc_hosts
from console.jobs.sync.gc import DEFAULT_KEEP as SYNC_DEFAULT_KEEP
from console.jobs.sync.gc import HostGc
from console.jobs.sync.gc import gc_hosts as sync_gc_hosts
from console.transport.pool import ClusterConnections

SYNC_DESCRIPTION = (
    "every --sync of a changed tree leaves a new tree (~/.cache/distconsole/sync/trees/"
    "NAME-ID) and new objects on each host. This keeps each name's last N synced trees "
    "(reusing a tree counts as syncing it) and every tree a process works in, removes the "
    "others (--name: only that synced directory's) and every object no kept tree links to "
    "(none stored within the last hour: a sync may be linking it), and prints per host what "
    "it freed (--dry-run: what it would)."
)
HELP = "free every host of ended jobs' directories and Ray temp dirs (--sync: old sync trees)"
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def duration(text: str) -> float:
    """``type=`` for ``--older-than``: ``30d``, ``12h``, ``90m``, ``0s``, ``1d12h``."""
    raw = text.strip().lower()
    parts = DURATION.findall(raw)
    if not raw or "".join(n + u for n, u in parts) != raw:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: a number and a unit, s m h d or w (30d, 12h, 0s)"
        )
    return sum(float(number) * UNITS[unit] for number, unit in parts)


def register(sub: Any) -> None:
    parser = sub.add_parser("gc", help=HELP, description=__doc__)
    options.add_inventory(parser)
    options.add_host_selection(parser)
    parser.add_argument(
        "--older-than",
        type=duration,
        default=None,
        metavar="DURATION",
        help="remove jobs that ended longer ago than this (default 30d)",
    )
    parser.add_argument(
        "--keep",
        type=options.whole_number,
        default=None,
        metavar="N",
        help="keep the N jobs that ended last, however old (default 0); "
        f"with --sync: trees kept per synced directory (default {SYNC_DEFAULT_KEEP})",
    )
    parser.add_argument(
        "--sync",
        action="store_true",
        help="free the --sync stores instead: old trees and the objects only they used",
    )
    add_sync_options(parser, "with --sync: ")
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would be removed; remove nothing"
    )
    options.add_json(parser, "print what was (or would be) freed per host as JSON")
    parser.set_defaults(func=run)


def register_sync_gc(sub: Any) -> None:
    """``sync-gc HOSTS [--keep N] [--name NAME] [--dry-run]``: the alias of ``gc --sync``
    kept for the scripts that use it (cli.ALIASES)."""
    parser = sub.add_parser(
        "sync-gc",
        help="remove old --sync trees and the objects only they used, on every host",
        description="The same as `distconsole gc --sync`: " + SYNC_DESCRIPTION,
    )
    options.add_inventory(parser)
    options.add_host_selection(parser)
    parser.add_argument(
        "--keep",
        type=options.whole_number,
        default=SYNC_DEFAULT_KEEP,
        metavar="N",
        help=f"synced trees kept per name, the most recent (default {SYNC_DEFAULT_KEEP})",
    )
    add_sync_options(parser)
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would be removed; remove nothing"
    )
    parser.set_defaults(func=run_sync)


def add_sync_options(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    parser.add_argument(
        "--name",
        dest="tree_names",
        action="append",
        metavar="NAME",
        help=f"{prefix}only the trees of this synced directory's name (repeatable; default: all)",
    )


def run(args: argparse.Namespace) -> int:
    if args.sync:
        if args.older_than is not None:
            raise UsageError("--older-than", "applies to job directories, not to --sync")
        return run_sync(args)
    if args.tree_names:
        raise UsageError("--name", "applies to --sync trees only")
    inventory = inventory_module.load(args.inventory)
    hosts = options.selected_hosts(inventory, args.names, args.tags)
    older_than = DEFAULT_OLDER_THAN_S if args.older_than is None else args.older_than
    keep = 0 if args.keep is None else args.keep
    return asyncio.run(
        jobs_gc(hosts, older_than=older_than, keep=keep, dry_run=args.dry_run, as_json=args.json)
    )


async def jobs_gc(
    hosts: Sequence[Host], *, older_than: float, keep: int, dry_run: bool, as_json: bool
) -> int:
    async with ClusterConnections(hosts) as pool:
        await pool.wait_settled()
        outcomes = await gc_hosts(
            pool, [h.name for h in hosts], older_than=older_than, keep=keep, dry_run=dry_run
        )
    status = 0
    done = []
    for outcome in outcomes.values():
        if isinstance(outcome, str):
            print(f"distconsole gc: {outcome}", file=sys.stderr)
            status = 1
        else:
            done.append(outcome)
    if as_json:
        print(json.dumps([d.as_json() for d in done], indent=2))
    else:
        for outcome in done:
            print("\n".join(job_lines(outcome)))
    return status


def job_lines(done: HostJobsGc) -> list[str]:
    removed = done.with_action("removed")
    ray = sum(1 for j in removed if j.ray_dir)
    jobs = sum(1 for j in removed if j.job_id)
    verb = "would free" if done.dry_run else "freed"
    head = f"{done.host}: {verb} {byte_size(done.bytes_freed)}: {jobs} job(s)"
    if ray:
        head += f" and {ray} Ray temp dir(s)"
    kept = [
        f"{len(done.with_action(action))} {what}"
        for action, what in (("running", "running"), ("recent", "recent"), ("kept", "by --keep"))
        if done.with_action(action)
    ]
    lines = [head + (f"; kept {', '.join(kept)}" if kept else "")]
    remove = "would remove" if done.dry_run else "removed"
    for job in removed:
        if not job.job_id:  # its job directory is gone (another host sharing the home)
            lines.append(f"  {remove} {job.ray_dir}, of no job here ({byte_size(job.bytes)})")
            continue
        extra = f" and {job.ray_dir}" if job.ray_dir else ""
        lines.append(f"  {remove} {job.job_id}{extra} ({byte_size(job.bytes)})")
    lines += [f"  running {j.job_id}: {j.why}" for j in done.with_action("running")]
    return lines


def sync_lines(done: HostGc) -> list[str]:
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


def run_sync(args: argparse.Namespace) -> int:
    """``gc --sync`` and ``sync-gc``."""
    inventory = inventory_module.load(args.inventory)
    hosts = options.selected_hosts(inventory, args.names, args.tags)
    keep = SYNC_DEFAULT_KEEP if args.keep is None else args.keep
    return asyncio.run(
        sync_gc(
            hosts,
            keep=keep,
            dry_run=args.dry_run,
            tree_names=args.tree_names,
            as_json=getattr(args, "json", False),
        )
    )


async def sync_gc(
    hosts: Sequence[Host],
    *,
    keep: int,
    dry_run: bool,
    tree_names: Sequence[str] | None,
    as_json: bool = False,
) -> int:
    status = 0
    async with ClusterConnections(hosts) as pool:
        await pool.wait_settled()
        outcomes = await sync_gc_hosts(
            pool, [h.name for h in hosts], keep=keep, dry_run=dry_run, tree_names=tree_names
        )
    done = []
    for outcome in outcomes.values():
        if isinstance(outcome, str):
            print(f"distconsole gc --sync: {outcome}", file=sys.stderr)
            status = 1
        else:
            done.append(outcome)
    if as_json:
        print(json.dumps([sync_json(d) for d in done], indent=2))
    else:
        for outcome in done:
            print("\n".join(sync_lines(outcome)))
    return status


def sync_json(done: HostGc) -> dict[str, Any]:
    return {
        "host": done.host,
        "dry_run": done.dry_run,
        "bytes_freed": done.bytes_freed,
        "removed": list(done.removed),
        "kept": list(done.kept),
        "busy": list(done.busy),
        "objects": done.objects,
        "stale": done.stale,
    }
