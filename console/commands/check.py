"""`distconsole check HOSTS`: can every host be reached, and what is it?

Connects to every host at once, then runs one facts command on each host that is up
(see console/probe/facts.py). Prints a table, or ``--json``. Exit status: 0 when every
host is up and answered, 1 when any is not, 2 for bad input (inventory, options).
A host that is down or black-holed costs its connect_timeout, never more.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from console import display
from console.commands.parts import options
from console.display import NOT_REPORTED
from console.errors import CommandTimeout, ConsoleError
from console.inventory import Host, load
from console.settings import DEFAULT_SETTINGS
from console.transport.base import HostState, HostStatus

if TYPE_CHECKING:
    from console.probe.facts import HostFacts

FACTS_TIMEOUT_S = 15.0  # after connecting; nvidia-smi on a sick GPU can take a while


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "check",
        help="connect to every host and show its state, OS, Python, torch, GPUs, disk",
        description="Connect to every host of an inventory and report whether it is up "
        "(and why not), plus OS/kernel, CPUs, memory, Python, torch, GPUs and free disk in "
        "work_dir. Exit status 0: all up; 1: any host not up or not answering; 2: bad input.",
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """check's options; kept apart so that later flags (--preflight) join the same parser."""
    options.add_inventory(parser)
    options.add_json(parser, "print a JSON list, one per host")
    parser.add_argument(
        "--timeout",
        type=options.seconds,
        default=None,
        metavar="S",
        help="give up after S seconds in all; hosts that have not answered by then are "
        f"reported down (default: the largest connect_timeout + {FACTS_TIMEOUT_S:g} s)",
    )
    options.add_host_selection(parser, "check only")
    parser.add_argument(
        "--preflight",
        action="store_true",
        help="run the launch pre-flight checks instead (same Python/torch on every host, "
        "interfaces, GPUs present and busy); exit 1 if one fails",
    )


@dataclass(frozen=True, slots=True)
class HostCheck:
    """One host's outcome: its connection status and, when up, its facts."""

    host: Host
    status: HostStatus
    facts: HostFacts | None = None
    error: str | None = None  # why the facts are missing although the host is up

    @property
    def ok(self) -> bool:
        return self.status.is_up and self.facts is not None

    @property
    def reason(self) -> str:
        if not self.status.is_up:
            return self.status.reason
        return self.error or ""

    @property
    def notes(self) -> tuple[str, ...]:
        notes: list[str] = []
        if self.host.insecure_host_keys:
            notes.append("host key NOT verified (insecure_host_keys: true)")
        facts = self.facts
        if facts is not None:
            notes.extend(facts.notes)
            if facts.nvidia_smi.startswith("failed"):
                notes.append(f"nvidia-smi {facts.nvidia_smi}")
            wanted = self.host.gpus
            if wanted != "auto" and wanted != facts.gpu_count and facts.nvidia_smi == "ok":
                notes.append(f"inventory says {wanted} GPUs, nvidia-smi shows {facts.gpu_count}")
        return tuple(notes)

    def to_json(self) -> dict[str, Any]:
        host, status = self.host, self.status
        data: dict[str, Any] = {
            "name": host.name,
            "address": host.address,
            "port": host.port,
            "user": host.user,
            "state": status.state.value,
            "reason": self.reason,
            "latency_ms": None if status.latency_ms is None else round(status.latency_ms, 1),
        }
        facts = self.facts.to_json() if self.facts is not None else {}
        for key in (
            "hostname", "os", "kernel", "arch", "cpus", "memory_total_bytes", "python",
            "python_path", "torch", "nvidia_smi", "work_dir", "disk_free_bytes",
        ):  # fmt: skip
            data[key] = facts.get(key)
        data["gpus"] = facts.get("gpu_count")
        data["gpu_models"] = facts.get("gpu_models", [])
        data["gpu_list"] = facts.get("gpus", [])
        data["gpus_expected"] = host.gpus
        data["gpu_source"] = host.gpu_source
        data["facts_via"] = facts.get("via")
        data["notes"] = list(self.notes)
        return data


async def collect(hosts: Sequence[Host], timeout: float | None = None) -> list[HostCheck]:
    """Connect to every host, gather facts on those up; bounded by ``timeout`` in all."""
    from console.probe.facts import gather_facts
    from console.transport.pool import ClusterConnections

    loop = asyncio.get_running_loop()
    pool = ClusterConnections(list(hosts), reconnect=False)
    # The slowest connect_timeout (per wave of parallel connects) plus a little.
    connect_limit = pool.settle_timeout()
    budget = timeout if timeout is not None else connect_limit + FACTS_TIMEOUT_S
    deadline = loop.time() + budget
    try:
        await pool.start()
        settle = min(budget, connect_limit)
        with contextlib.suppress(TimeoutError):
            # The pool bounds this itself; the outer limit guards the promise to end.
            await asyncio.wait_for(pool.wait_settled(timeout=settle), settle + 1.0)

        async def one(host: Host) -> HostCheck:
            conn = pool[host.name]
            status = conn.status
            if status.state is HostState.CONNECTING:
                return HostCheck(host, _not_answered(status, budget))
            if not status.is_up:
                return HostCheck(host, status)
            remaining = deadline - loop.time()
            if remaining <= 0:
                return HostCheck(
                    host, status, error=f"no time left for facts (--timeout {budget:g})"
                )
            try:
                facts = await gather_facts(conn, timeout=remaining)
            except CommandTimeout as exc:
                # str(exc) would quote the whole facts program
                error = f"the facts command did not finish within {exc.timeout:.1f}s"
                return HostCheck(host, conn.status, error=error)
            except ConsoleError as exc:
                return HostCheck(host, conn.status, error=str(exc))
            return HostCheck(host, conn.status, facts)

        return list(await asyncio.gather(*(one(h) for h in hosts)))
    finally:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(pool.close(), DEFAULT_SETTINGS.close_timeout_s)


def _not_answered(status: HostStatus, budget: float) -> HostStatus:
    reason = f"no answer within {budget:g}s (still connecting)"
    return HostStatus(status.name, HostState.DOWN, reason, status.latency_ms, status.since)


def run(args: argparse.Namespace) -> int:
    inventory = load(args.inventory)
    hosts = options.selected_hosts(inventory, args.names, args.tags)
    if args.preflight:
        from console.jobs.preflight.probe import check_command

        return check_command(hosts, as_json=args.json)
    checks = asyncio.run(collect(hosts, args.timeout))
    if args.json:
        json.dump([c.to_json() for c in checks], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(
            render_table(checks, colour=sys.stdout.isatty() and "NO_COLOR" not in os.environ)
        )
    return 0 if all(c.ok for c in checks) else 1


# -- table ---------------------------------------------------------------------------------

COLUMNS = (
    "HOST",
    "STATE",
    "LATENCY",
    "OS / KERNEL",
    "CPUS",
    "MEMORY",
    "PYTHON",
    "TORCH",
    "GPUS",
    "FREE DISK",
    "REASON",
)
_STATE_COLOUR = {HostState.UP: "32", HostState.CONNECTING: "33"}


def render_table(checks: Sequence[HostCheck], *, colour: bool = False) -> str:
    rows = [_row(c) for c in checks]
    widths = [max(len(r[i]) for r in [list(COLUMNS), *rows]) for i in range(len(COLUMNS) - 1)]
    lines = []
    for index, row in enumerate([list(COLUMNS), *rows]):
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        if colour and index > 0:
            state = checks[index - 1].status.state
            code = _STATE_COLOUR.get(state, "31")
            cells[1] = f"\x1b[{code}m{cells[1]}\x1b[0m"
        lines.append("  ".join([*cells, row[-1]]).rstrip())
        if index > 0:
            lines.extend(f"    note: {note}" for note in checks[index - 1].notes)
    up = sum(c.ok for c in checks)
    lines.append(f"{up}/{len(checks)} hosts up and answering")
    return "\n".join(lines) + "\n"


def _row(check: HostCheck) -> list[str]:
    status, facts = check.status, check.facts
    latency = display.latency(status.latency_ms)
    if facts is None:
        rest = [NOT_REPORTED] * 7
    else:
        rest = [
            " / ".join(x for x in (facts.os, facts.kernel) if x) or NOT_REPORTED,
            display.figure(facts.cpus),
            display.byte_size(facts.memory_total_bytes),
            facts.python or "missing",
            facts.torch or "missing",
            _gpus(check.host, facts),
            display.byte_size(facts.disk_free_bytes),
        ]
    return [check.host.name, status.state.value, latency, *rest, check.reason]


def _gpus(host: Host, facts: HostFacts) -> str:
    if host.gpu_source == "simulated":
        return f"{host.gpus} simulated"
    if facts.nvidia_smi == "missing":
        return "0 (no nvidia-smi)"
    if facts.nvidia_smi != "ok":
        return "? (nvidia-smi failed)"
    if not facts.gpus:
        return "0"
    return f"{facts.gpu_count}x {', '.join(facts.gpu_models) or NOT_REPORTED}"
