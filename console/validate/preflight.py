"""``launch --validate``: the quick validation as the last pre-flight step.

``jobs`` sits below ``validate`` (import-linter's layers), so the launch's caller builds
the check here and hands it to :meth:`JobService.launch`; the service turns a fail into a
refused launch and a warn into a line. The verdicts are kept like ``validate``'s own, so
``health``, the host detail and a job's report show them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from console.inventory import Host, Inventory
from console.jobs.service import PreValidate, ValidationVerdict
from console.validate import store
from console.validate.runner import Connections, Plan, validate_hosts
from console.validate.verdicts import LinkRow, Row, judge_hosts, judge_links, worst


def verdict_of(
    rows: Sequence[Row], links: Sequence[LinkRow], errors: Sequence[str] = ()
) -> ValidationVerdict:
    """The worst of the rows and links (a link test that could not run fails, as it makes
    ``validate`` exit 1), with a line for each that is not ok."""
    lines: list[str] = []
    for row in rows:
        if row.state != "ok":
            where = row.host if row.gpu is None else f"{row.host} GPU {row.gpu}"
            lines.append(f"{where}: {row.state}: {'; '.join(row.reasons)}")
    for link in links:
        if link.state != "ok":
            pair = f"{link.hosts[0]}<->{link.hosts[1]}"
            lines.append(f"link {pair}: {link.state}: {'; '.join(link.reasons)}")
    lines += [f"error: {e}" for e in errors]
    states = [*(r.state for r in rows), *(link.state for link in links)]
    state = "fail" if errors else worst(states)
    return ValidationVerdict(state, tuple(lines))


async def measure_and_keep(
    connections: Connections,
    hosts: Sequence[Host],
    inventory_path: str,
    plan: Plan,
    progress: Callable[[str], None],
) -> tuple[list[Row], ValidationVerdict]:
    """Validate ``hosts`` (those up), judge, keep each host's verdict for
    ``inventory_path``; the rows and the verdict (also the hosts screen's key)."""
    outcome = await validate_hosts(connections, hosts, plan, progress)
    links, host_links = judge_links(outcome.pairs, plan.thresholds)
    rows = judge_hosts(outcome.hosts, plan.thresholds, host_links)
    await asyncio.to_thread(store.save, inventory_path, rows)
    return rows, verdict_of(rows, links, outcome.link_errors)


def quick_validation(
    connections: Connections, inventory: Inventory, inventory_path: str
) -> PreValidate:
    """The check ``JobService.launch(validate=...)`` runs: ``validate --quick`` on the
    plan's hosts, its verdicts saved for ``inventory_path``."""

    async def check(names: tuple[str, ...], progress: Callable[[str], None]) -> ValidationVerdict:
        hosts = inventory.select(list(names))
        _rows, verdict = await measure_and_keep(
            connections, hosts, inventory_path, Plan(quick=True), progress
        )
        return verdict

    return check
