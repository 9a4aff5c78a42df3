"""Save the README's picture of the dense GPU view: 256 hosts x 8 GPUs at 200x50.

    python scripts/dense_screenshot.py [--out docs/gpus-256.svg]

No cluster of 256 GPU hosts is at hand: the views are the fixed ones of the dense-view
tests (tests/ui/dense_fixtures.py: a captured 8 x H100 nvidia-smi table, with
utilization, memory, temperature and four jobs set per host), fed to the real app.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "ui")]

from dense_fixtures import dense_inventory, dense_statuses, dense_views  # noqa: E402
from ui_fixtures import FROZEN_NOW  # noqa: E402

from console.ui.app import DistConsoleApp  # noqa: E402


async def shoot(out: Path) -> None:
    app = DistConsoleApp(dense_inventory(), connections_factory=None, clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.press("g")
        await pilot.pause()
        app.apply_statuses(dense_statuses())
        for step in range(3):
            app.apply_views(dense_views(step))
        await pilot.pause()
        app.save_screenshot(filename=out.name, path=str(out.parent))
    print(f"saved {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "gpus-256.svg")
    asyncio.run(shoot(parser.parse_args().out))


if __name__ == "__main__":
    main()
