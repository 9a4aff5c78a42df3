"""Save SVG screenshots of the console's screens into docs/ (for the README).

    python scripts/screenshots.py [--out docs]

The hosts screens show a fixed example inventory with fixed states (no connections), so
the pictures do not change from run to run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from console.inventory import Host, Inventory  # noqa: E402
from console.transport.base import HostState, HostStatus  # noqa: E402
from console.ui.app import DistConsoleApp  # noqa: E402

NOW = 1_700_000_000.0
SIZE = (120, 26)

Prepare = Callable[[DistConsoleApp], Awaitable[None]]


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


async def shoot(path: Path, theme: str, press: tuple[str, ...] = ()) -> None:
    app = DistConsoleApp(
        example_inventory(), theme=theme, connections_factory=None, clock=lambda: NOW
    )
    async with app.run_test(size=SIZE) as pilot:
        app.hosts_screen.apply_statuses(example_statuses())
        await pilot.pause()
        if press:
            await pilot.press(*press)
            await pilot.pause()
        app.save_screenshot(filename=path.name, path=str(path.parent))
    print(path)


async def shoot_gpus(path: Path, theme: str) -> None:
    # The fixed GPU figures of the UI snapshot tests (shaped like real A100 samples).
    sys.path.insert(0, str(ROOT / "tests" / "ui"))
    from ui_fixtures import FROZEN_NOW, gpu_inventory, gpu_views

    app = DistConsoleApp(
        gpu_inventory(), theme=theme, connections_factory=None, clock=lambda: FROZEN_NOW
    )
    async with app.run_test(size=(130, 40)) as pilot:
        await pilot.press("g")
        for step in range(12):
            app.cluster_screen.apply_views(gpu_views(step))
        await pilot.pause()
        app.save_screenshot(filename=path.name, path=str(path.parent))
    print(path)


async def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    await shoot_gpus(out / "cluster-dark.svg", "distconsole-dark")
    await shoot(out / "hosts-dark.svg", "distconsole-dark")
    await shoot(out / "hosts-light.svg", "distconsole-light")
    await shoot(out / "help.svg", "distconsole-dark", press=("question_mark",))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="folder for the SVGs")
    asyncio.run(main(parser.parse_args().out))
