"""The small job `distconsole demo` starts so that its first screen is alive.

It is a bundled example on the first hosts (never more than a few: each rank is a real
process on this machine), paced with ``--sleep`` so it trains for minutes, launched
detached through the same runner and history as ``launch --detach``. DDP when torch is
importable by the hosts' Python (the demo's hosts run the console's), else the
parameter-server example, which needs only the standard library.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from console import inventory as inventory_module
from console.errors import ConsoleError
from console.jobs.history import JobHistory
from console.jobs.models import JobState
from console.jobs.spec import JobSpec, make_spec
from console.jobs.ssh.runner import JobRunner
from console.transport.pool import ClusterConnections

MAX_HOSTS = 4
GPUS_PER_HOST = 2
STEPS_PER_RANK = 1200
SLEEP_S = 0.5  # per step: 1200 steps take about ten minutes


def demo_spec(host_names: tuple[str, ...], *, torch_available: bool) -> JobSpec:
    if torch_available:
        ranks = len(host_names) * GPUS_PER_HOST
        return make_spec(
            kind="ddp",
            program="example:ddp",
            args=("--sleep", str(SLEEP_S)),
            hosts=host_names,
            gpus_per_host=GPUS_PER_HOST,
            total_steps=STEPS_PER_RANK * ranks,
            name="demo-ddp",
        )
    return make_spec(
        kind="ps",
        program="example:ps",
        args=("--sleep", str(SLEEP_S)),
        hosts=host_names,
        total_steps=STEPS_PER_RANK * len(host_names),
        name="demo-ps",
    )


async def start_training(inventory_path: Path) -> tuple[str, str | None]:
    """Launch the demo's job; a line for the console to show (what runs, or why not),
    and the job's id (None: not started), which the console then does not announce as
    a job it re-attached to."""
    inventory = inventory_module.load(inventory_path)
    names = tuple(h.name for h in inventory.hosts[:MAX_HOSTS])
    torch_available = importlib.util.find_spec("torch") is not None
    spec = demo_spec(names, torch_available=torch_available)
    pool = ClusterConnections(inventory.select(list(names)))
    try:
        await pool.wait_settled()
        runner = JobRunner(pool, inventory, history=JobHistory())
        runner.require_up(names, what="the demo's job")
        job = await runner.launch(await runner.prepare(spec))
    except ConsoleError as exc:
        return f"The demo's job did not start: {exc}", None
    finally:
        await pool.close()
    what = f"{spec.program} ({job.plan.world_size} ranks on {', '.join(names)})"
    if not torch_available:
        what += "; torch is not installed, so not the DDP example"
    return f"Training {what}: j lists jobs, Enter on one opens its logs", job.id


def record_power_off(inventory_path: Path) -> int:
    """Jobs of the demo that were still running end with its hosts: say so in the history,
    so that no later console (``--dir`` reused) re-attaches to processes that are gone."""
    history = JobHistory()
    unfinished = history.unfinished(str(inventory_path))
    for record in unfinished:
        history.set_state(
            record.id, JobState.STOPPED, failure="the demo cluster was powered off (quit)"
        )
    return len(unfinished)
