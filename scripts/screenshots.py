"""Save SVG screenshots of the console's screens into docs/ (for the README).

    python scripts/screenshots.py [--out docs] [--hosts 4] [--gpus-per-host 2]
    python scripts/screenshots.py --fixed [--out docs]

By default the pictures are of the real thing: the embedded demo cluster (in-process SSH
servers on loopback with simulated GPUs, ``distconsole demo --serve``) is started, a real
DDP job (``example:ddp`` under torchrun) is launched on it from the launch form, and the
console is shot as the job runs: cluster.svg, hosts.svg, launch.svg, jobs.svg, logs.svg,
help.svg. The job and the demo cluster are stopped afterwards and the script checks that
none of the job's processes is left.

``--fixed`` shoots a fixed example inventory with fixed states instead (no connections),
so those pictures do not change from run to run: *-fixed.svg.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from textual.pilot import Pilot  # noqa: E402
from textual.widgets import DataTable, Input  # noqa: E402

from console import inventory as inventory_module  # noqa: E402
from console.inventory import Host, Inventory  # noqa: E402
from console.jobs.history import DATA_DIR_ENV  # noqa: E402
from console.jobs.models import JobState  # noqa: E402
from console.transport.base import HostState, HostStatus  # noqa: E402
from console.ui.app import DistConsoleApp  # noqa: E402
from console.ui.screens.jobs import JobsScreen  # noqa: E402
from console.ui.screens.launch import LaunchScreen  # noqa: E402
from console.ui.screens.logs import LogsScreen  # noqa: E402

NOW = 1_700_000_000.0
FIXED_SIZE = (120, 26)
LIVE_SIZE = (140, 40)
JOB_ENV = "DISTCONSOLE_JOB_ID"
DEMO_START_TIMEOUT_S = 60.0


# -- live: the demo cluster and a real job -------------------------------------------------


class DemoServer:
    """``distconsole demo --serve`` as a child process; SIGTERM makes it end every
    process it started (the job's included) and remove its folder."""

    def __init__(self, hosts: int, directory: Path) -> None:
        self.hosts = hosts
        self.directory = directory
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> Path:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "console", "demo", "--serve", "--hosts", str(self.hosts),
             "--dir", str(self.directory)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line:
            self.stop()
            code = self.proc.returncode
            raise SystemExit(f"screenshots: the demo cluster did not start (exit {code})")
        return Path(line)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def until(pilot: Pilot[Any], check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        await pilot.pause(0.25)
    raise SystemExit(f"screenshots: not within {timeout:.0f}s: {what}")


def save(app: DistConsoleApp, path: Path) -> None:
    app.save_screenshot(filename=path.name, path=str(path.parent))
    print(path, flush=True)


def job_processes(job_id: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if proc.environ().get(JOB_ENV) == job_id:
                found.append(proc)
    return found


def ranks_on_gpus(app: DistConsoleApp, job_id: str) -> set[int]:
    ranks: set[int] = set()
    for view in app.store.views.values():
        for gpu in view.sample.gpus if view.sample else ():
            ranks.update(p.rank for p in gpu.processes if p.job == job_id and p.rank is not None)
    return ranks


def stepping_ranks(logs: LogsScreen) -> set[int]:
    table = logs.query_one("#steps-table", DataTable)
    return {i for i in range(table.row_count) if table.get_row_at(i)[2].plain}


async def shoot_live(out: Path, args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="dc-shots-"))
    # The job history of these pictures is theirs alone, not the user's.
    os.environ[DATA_DIR_ENV] = str(work / "data")
    demo = DemoServer(args.hosts, work / "demo")
    job_id: str | None = None
    try:
        inventory = inventory_module.load(demo.start())
        app = DistConsoleApp(inventory, theme=args.theme)
        async with app.run_test(size=LIVE_SIZE) as pilot:
            names = [h.name for h in inventory.hosts]
            await until(pilot, lambda: app.jobs is not None, 30, "job control ready")
            await until(
                pilot,
                lambda: all(app.hosts_screen.table.state_of(n) == "up" for n in names),
                30,
                "every demo host up",
            )
            await until(pilot, lambda: len(app.store.views) == len(names), 30, "first GPU samples")
            await pilot.pause(1.5)  # a few samples: latencies and sparklines settle
            save(app, out / "hosts.svg")

            await pilot.press("l")
            await until(pilot, lambda: isinstance(app.screen, LaunchScreen), 5, "launch form")
            form = app.screen
            assert isinstance(form, LaunchScreen)
            form.query_one("#gpus_per_host", Input).value = str(args.gpus_per_host)
            form.query_one("#args", Input).value = f"--steps {args.steps} --sleep {args.sleep}"
            form.query_one("#name", Input).value = "demo-ddp"
            await until(
                pilot,
                lambda: form.spec is not None and form.spec.name == "demo-ddp",
                5,
                f"a valid form ({form.errors})",
            )
            assert form.spec is not None
            previewed = form.job_id_for(form.spec)
            # The top of the form (kind, hosts, GPUs, program, arguments) next to the preview.
            form.query_one("#gpus_per_host", Input).focus()
            form.query_one("#launch-form").scroll_home(animate=False)
            await pilot.pause(0.3)
            save(app, out / "launch.svg")

            await pilot.press("enter")  # Enter in a field launches (pre-flight included)
            await until(pilot, lambda: isinstance(app.screen, JobsScreen), 120, "job launched")
            jobs = app.screen
            assert isinstance(jobs, JobsScreen)
            await until(pilot, lambda: jobs.selected_id is not None, 10, "the job listed")
            job_id = jobs.selected_id
            assert job_id is not None and app.jobs is not None
            if job_id != previewed:
                raise SystemExit(f"screenshots: launched {job_id}, the preview showed {previewed}")
            world = args.hosts * args.gpus_per_host
            job = app.jobs.runner.jobs[job_id]
            await until(pilot, lambda: job.state is JobState.RUNNING, 60, "job running")

            await pilot.press("g")
            await until(
                pilot,
                lambda: ranks_on_gpus(app, job_id) == set(range(world)),
                120,
                f"all {world} ranks of {job_id} on the simulated GPUs",
            )
            await pilot.pause(3)  # utilisation follows the ranks' CPU use over a few samples
            save(app, out / "cluster.svg")

            await pilot.press("j")
            await until(pilot, lambda: isinstance(app.screen, JobsScreen), 5, "jobs screen")
            await pilot.pause(0.5)
            save(app, out / "jobs.svg")

            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, LogsScreen), 10, "logs screen")
            logs = app.screen
            assert isinstance(logs, LogsScreen)
            await until(
                pilot, lambda: stepping_ranks(logs) == set(range(world)), 120, "every rank stepping"
            )
            # Steps/s is measured between batches: the first batch alone gives none.
            await until(
                pilot,
                lambda: all(r.steps_per_s is not None for r in logs.steps.ranks()),
                90,
                "a step rate for every rank",
            )
            await pilot.pause(1.2)  # the steps panel refreshes every second
            save(app, out / "logs.svg")

            await pilot.press("question_mark")
            await pilot.pause(0.5)
            save(app, out / "help.svg")
            await pilot.press("escape")

            if job.state is not JobState.RUNNING:
                raise SystemExit(f"screenshots: the job ended early ({job.state.value}); "
                                 "raise --steps")  # fmt: skip
            report = await app.jobs.stop(job_id)
            print(f"{job_id}: {report.describe()}", flush=True)
    finally:
        demo.stop()
        with contextlib.suppress(OSError):
            import shutil

            shutil.rmtree(work)
    if job_id is not None:
        left = job_processes(job_id)
        if left:
            raise SystemExit(f"screenshots: processes of {job_id} left running: "
                             f"{[p.pid for p in left]}")  # fmt: skip
        print(f"{job_id}: nothing left running", flush=True)


# -- fixed: an example inventory with fixed states, no connections -------------------------


def example_inventory() -> Inventory:
    return Inventory(
        path="hosts.yaml",
        hosts=(
            Host(name="node0", address="10.0.0.10", user="alice", gpus=8, tags=("a100", "rack1")),
            Host(name="node1", address="10.0.0.11", user="alice", gpus=8, tags=("a100", "rack1")),
            Host(name="node2", address="10.0.0.12", user="alice", gpus=8, tags=("a100", "rack2")),
            Host(name="node3", address="10.0.0.13", user="alice", port=2022, tags=("h100",)),
            Host(name="node4", address="gpu-4.internal", proxy_jump="bastion", tags=("h100",)),
            Host(name="workstation", address="local", tags=("dev",)),
        ),
    )


def example_statuses() -> list[HostStatus]:
    return [
        HostStatus("node0", HostState.UP, latency_ms=7.9, since=NOW - 3600, last_seen=NOW),
        HostStatus("node1", HostState.UP, latency_ms=8.3, since=NOW - 3600, last_seen=NOW),
        HostStatus(
            "node2",
            HostState.DOWN,
            reason="connection lost: keepalive timeout",
            since=NOW - 140,
            last_seen=NOW - 141,
        ),
        HostStatus("node3", HostState.UP, latency_ms=21.0, since=NOW - 900, last_seen=NOW),
        HostStatus(
            "node4",
            HostState.AUTH_FAILED,
            reason="permission denied (publickey) for root",
            since=NOW - 30,
            last_seen=None,
        ),
        HostStatus("workstation", HostState.UP, latency_ms=0.4, since=NOW - 3600, last_seen=NOW),
    ]


async def shoot_fixed_hosts(path: Path, theme: str, press: tuple[str, ...] = ()) -> None:
    app = DistConsoleApp(
        example_inventory(), theme=theme, connections_factory=None, clock=lambda: NOW
    )
    async with app.run_test(size=FIXED_SIZE) as pilot:
        app.apply_statuses(example_statuses())
        await pilot.pause()
        if press:
            await pilot.press(*press)
            await pilot.pause()
        save(app, path)


async def shoot_fixed_gpus(path: Path, theme: str) -> None:
    # The fixed GPU figures of the UI snapshot tests (shaped like real A100 samples).
    sys.path.insert(0, str(ROOT / "tests" / "ui"))
    from ui_fixtures import FROZEN_NOW, gpu_inventory, gpu_views

    app = DistConsoleApp(
        gpu_inventory(), theme=theme, connections_factory=None, clock=lambda: FROZEN_NOW
    )
    async with app.run_test(size=(130, 40)) as pilot:
        await pilot.press("g")
        for step in range(12):
            app.apply_views(gpu_views(step))
        await pilot.pause()
        save(app, path)


async def shoot_fixed(out: Path) -> None:
    await shoot_fixed_gpus(out / "cluster-fixed.svg", "distconsole-dark")
    await shoot_fixed_hosts(out / "hosts-fixed.svg", "distconsole-dark")
    await shoot_fixed_hosts(out / "hosts-light-fixed.svg", "distconsole-light")
    await shoot_fixed_hosts(out / "help-fixed.svg", "distconsole-dark", press=("question_mark",))


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    assert __doc__ is not None
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="folder for the SVGs")
    parser.add_argument(
        "--fixed", action="store_true", help="fixed example data, no demo cluster (*-fixed.svg)"
    )
    parser.add_argument("--hosts", type=positive_int, default=4, help="demo hosts (default 4)")
    parser.add_argument(
        "--gpus-per-host", type=positive_int, default=2, help="ranks per host (default 2)"
    )
    parser.add_argument(
        "--steps", type=positive_int, default=400, help="steps of the example job (default 400)"
    )
    parser.add_argument(
        "--sleep",
        type=non_negative_float,
        default=0.2,
        help="seconds each step sleeps (default 0.2: the job runs over a minute)",
    )
    parser.add_argument("--theme", default="distconsole-dark", help="console theme")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.fixed:
        asyncio.run(shoot_fixed(out))
    else:
        asyncio.run(shoot_live(out.resolve(), args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
