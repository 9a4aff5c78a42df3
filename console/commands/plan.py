"""``distconsole plan HOSTS --kind KIND [options] [--json] -- PROGRAM [ARGS...]``.

Prints what a launch would run, without touching any host: per process its host, role,
the exact shell command line, environment, working directory and log files.
Exit status 2 for bad input (naming the option), 0 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shlex
from typing import Any

from console import inventory as inventory_module
from console.commands.parts import launch_slurm
from console.commands.parts.job_options import naming_options, register_job_command, spec_from_args
from console.jobs.models import JobPlan, RankLaunch
from console.jobs.notify import masked, notify_line
from console.jobs.paths import shell_join
from console.jobs.plan.planner import plan as make_plan
from console.jobs.plan.ray import dashboard_target
from console.jobs.sync.push import scan_for_spec, spec_in_tree
from console.jobs.sync.tree import SyncTree


def register(sub: Any) -> None:
    register_job_command(
        sub,
        "plan",
        help="show the exact per-host commands, environment and log files of a job",
        run=run,
        extra=_add_json_option,
    )


def _add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    launch_slurm.add_scheduler_options(parser)


def launch_to_dict(launch: RankLaunch) -> dict[str, Any]:
    return {
        "host": launch.host,
        "role": launch.role,
        "index": launch.index,
        "argv": list(launch.argv),
        "command": shell_join(launch.argv),
        "env": dict(launch.env),
        "cwd": launch.cwd,
        "ranks": list(launch.ranks),
        "log_paths": [dataclasses.asdict(log) for log in launch.log_paths],
    }


def sync_to_dict(tree: SyncTree | None) -> dict[str, Any] | None:
    if tree is None:
        return None
    return {
        "source": tree.source,
        "remote_dir": tree.remote_dir,
        "files": len(tree.entries),
        "bytes": tree.total_bytes,
        "rules": tree.lister,
    }


def plan_to_dict(plan: JobPlan, tree: SyncTree | None = None) -> dict[str, Any]:
    """The plan as plain JSON-able data (the ``--json`` output)."""
    return {
        "sync": sync_to_dict(tree),
        "job_id": plan.job_id,
        "name": plan.name,
        "kind": plan.kind.value,
        "world_size": plan.world_size,
        "total_steps": plan.total_steps,
        "steps_per_rank": plan.steps_per_rank,
        "steps_dropped": plan.steps_dropped,
        "master_addr": plan.master_addr,
        "master_port": plan.master_port,
        "fail_fast": plan.fail_fast,
        "hang_timeout": plan.hang_timeout,
        "stop_on_hang": plan.stop_on_hang,
        "notify": masked(plan.notify),
        "hosts": list(plan.hosts_involved),
        "rendezvous_host": plan.rendezvous_host,
        "job_dirs": dict(plan.job_dirs),
        "uploads": [dataclasses.asdict(u) for u in plan.uploads],
        "warnings": list(plan.warnings),
        "notes": list(plan.notes),
        "launches": [launch_to_dict(launch) for launch in plan.launches],
    }


def hang_line(plan: JobPlan) -> str:
    if plan.hang_timeout is None:
        return "hang check: off"
    then = "stop the job" if plan.stop_on_hang else "keep it running"
    return (
        f"hang check: hung after {plan.hang_timeout:g} s without a new log line; "
        f"capture every rank's stacks, then {then}"
    )


def format_plan(plan: JobPlan, tree: SyncTree | None = None) -> str:
    """Human-readable plan: per process the shell command line and its environment."""
    lines = [
        f"job {plan.job_id} ({plan.name}): {plan.kind.value}, world size {plan.world_size}, "
        f"hosts {', '.join(plan.hosts_involved)}"
    ]
    if tree is not None:
        lines.append(f"sync: {tree.describe()} on every host")
    if plan.total_steps is not None:
        lines.append(
            f"steps: {plan.total_steps} total, {plan.steps_per_rank} per rank, "
            f"{plan.steps_dropped} dropped by the split"
        )
    if plan.master_port is not None:
        lines.append(f"master: {plan.master_addr}:{plan.master_port}")
    lines.append(hang_line(plan))
    notified = notify_line(plan)
    if notified is not None:
        lines.append(notified)
    lines += list(plan.notes)
    lines += [f"warning: {w}" for w in plan.warnings]
    for launch in plan.launches:
        ranks = f" ranks {launch.ranks[0]}-{launch.ranks[-1]}" if launch.ranks else ""
        lines.append("")
        lines.append(f"[{launch.host}] {launch.role} {launch.index}{ranks}")
        lines.append(f"  cwd: {launch.cwd}")
        for key, value in launch.env.items():
            lines.append(f"  env: {key}={shlex.quote(value)}")
        lines.append(f"  $ {shell_join(launch.argv)}")
        for log in launch.log_paths:
            lines.append(f"  log ({log.stream}): {log.path}")
    if plan.uploads:
        lines.append("")
        lines += [f"upload: {u.resource} -> {u.host}:{u.path}" for u in plan.uploads]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    inv = inventory_module.load(args.inventory)
    if launch_slurm.scheduler_of(args) == "slurm":
        with naming_options():
            prepared = asyncio.run(launch_slurm.prepare_only(args, spec, inv))
        if args.json:
            print(json.dumps({**plan_to_dict(prepared.plan), "script": prepared.script}, indent=2))
        else:
            print(launch_slurm.format_prepared(prepared, inv.slurm.login if inv.slurm else ""))
        return 0
    with naming_options():
        tree = scan_for_spec(spec)
        job_plan = make_plan(spec_in_tree(spec, tree), inv)
    if args.json:
        print(json.dumps({**plan_to_dict(job_plan, tree), **forward_dict(job_plan)}, indent=2))
    else:
        print(format_plan(job_plan, tree))
        offer = forward_line(job_plan, args.inventory)
        if offer:
            print(f"\n{offer}")
    return 0


def forward_dict(plan: JobPlan) -> dict[str, Any]:
    """``{"dashboard_forward": {host, dest_host, port}}`` for a Ray job, else nothing."""
    target = dashboard_target(plan)
    if target is None:
        return {}
    host, dest, port = target
    return {"dashboard_forward": {"host": host, "dest_host": dest, "port": port}}


def forward_line(plan: JobPlan, inventory_path: str) -> str | None:
    """The command that puts a Ray job's dashboard on this machine (its own port here)."""
    target = dashboard_target(plan)
    if target is None:
        return None
    host, dest, port = target
    where = f"{host}:{port}" if dest == "localhost" else f"{host}:{dest}:{port}"
    return (
        f"dashboard (listening on {host}): distconsole forward {shlex.quote(inventory_path)} "
        f"{where} --local-port {port}  then open http://127.0.0.1:{port}/"
    )
