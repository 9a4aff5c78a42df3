"""The cluster screen over real sshd hosts and the real streaming sampler.

This machine has no NVIDIA GPU: ``tests/standin/nvidia-smi`` is a GPU STAND-IN that
answers nvidia-smi's query flags from the real H200 capture; it goes first on each
host's PATH through the inventory's ``setup:`` line (as in tests/integration/test_sampler.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpu_standin import readable_standin_dir
from sshd_cluster import SETUP_LINE, SshdCluster
from textual.pilot import Pilot
from textual.widgets import DataTable

from console import inventory as inventory_module
from console.settings import make_settings
from console.ui.app import DistConsoleApp
from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.host_detail import HostDetailScreen
from console.ui.widgets.gpu_panel import HostPanel

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(150)]

STANDIN_DIR = readable_standin_dir()
STANDIN_SETUP = f"{SETUP_LINE} && export PATH={STANDIN_DIR}:$PATH"


async def until(pilot: Pilot[Any], check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"not within {timeout}s: {what}")


def sample_time(panel: HostPanel) -> float:
    view = panel.view
    return view.sample.time if view is not None and view.sample is not None else 0.0


async def test_panels_stream_and_a_down_host_greys_while_others_update(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=2)
    inventory = inventory_module.load(
        cluster.write_inventory(tmp_path / "hosts.yaml", setup=STANDIN_SETUP, connect_timeout=3)
    )
    first, second = (h.name for h in cluster.hosts)
    app = DistConsoleApp(inventory, settings=make_settings(monitor_interval_s=0.5))
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("g")
        screen = app.screen
        assert isinstance(screen, ClusterScreen)
        panels = {name: screen.query_one(f"#panel-{name}", HostPanel) for name in (first, second)}

        def streaming() -> bool:
            return all(
                p.view is not None and p.view.up and p.view.sample and p.view.sample.gpus
                for p in panels.values()
            )

        await until(pilot, streaming, 40, "both panels show the stand-in GPU")
        text = panels[first].render().plain
        assert "H200" in text and "pid 10291" in text  # the capture's GPU and its processes
        assert panels[first].border_subtitle == "nvidia-smi"

        cluster.stop(second)
        await until(pilot, lambda: panels[second].has_class("-down"), 20, "panel greys")
        assert "last seen" in str(panels[second].border_subtitle)
        seen = sample_time(panels[first])
        await until(pilot, lambda: sample_time(panels[first]) > seen + 0.9, 10, "first updates")
        assert not panels[first].has_class("-down")

        cluster.start(second)
        await until(pilot, lambda: not panels[second].has_class("-down"), 60, "panel back")
        back = sample_time(panels[second])
        await until(pilot, lambda: sample_time(panels[second]) > back, 10, "second streams")

        panels[second].focus()
        await pilot.press("enter")
        await pilot.pause()
        detail = app.screen
        assert isinstance(detail, HostDetailScreen) and detail.host.name == second
        assert detail.query_one("#detail-processes", DataTable).row_count == 3
        await pilot.press("escape", "q")
    assert app.return_code == 0
