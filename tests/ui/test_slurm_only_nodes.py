"""Slurm compute nodes that no inventory host maps to are drawn on the GPU screen
(issue 23 item 11), driven with Pilot against the real Slurm 22.05 cluster
(``tests/slurm_cluster.py``: slurmctld, slurmd n1 and n2) whose login host is the
inventory's one sshd host, so n1 and n2 are known only from Slurm. The login user's job
on n1 is sampled through ``srun --overlap`` (the GPU STAND-IN ``tests/standin/nvidia-smi``
on the step's PATH: there is no GPU here); another user's (root's) job on n2 gives no
figures. Both nodes get a panel tagged ``slurm-only`` and a block in the dense view
(named in its legend), and count in the summary's hosts."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from slurm_cluster import SlurmCluster, slurm_with_login, unavailable_reason
from sshd_cluster import unavailable_reason as sshd_unavailable
from textual.pilot import Pilot
from textual.widgets import Static

from console.inventory import Inventory
from console.settings import make_settings
from console.transport.pool import ClusterConnections
from console.ui.app import DistConsoleApp
from console.ui.screens.cluster import ClusterScreen
from console.ui.screens.host_detail import HostDetailScreen
from console.ui.store import SLURM_ONLY_REASON, SLURM_ONLY_TAG
from console.ui.widgets.gpu_panel import HostPanel

pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.timeout(200)]

WAIT_S = 90.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[SlurmCluster, Inventory]]:
    reason = unavailable_reason() or sshd_unavailable()
    if reason is not None:
        pytest.skip(reason)
    with slurm_with_login(tmp_path) as made:
        yield made


async def until(pilot: Pilot[Any], check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"not within {WAIT_S:g} s: {what}"
        await pilot.pause(0.2)


def panel(screen: ClusterScreen, name: str) -> HostPanel | None:
    found = screen.query(f"#panel-{name}")
    return found.first(HostPanel) if found else None


async def test_nodes_known_only_from_slurm_are_drawn(
    cluster: tuple[SlurmCluster, Inventory],
) -> None:
    slurm, inventory = cluster
    login = inventory.hosts[0]
    pool = ClusterConnections(inventory)
    await pool.wait_settled()
    conn = pool[login.name]
    ids: list[str] = []
    try:
        mine = await conn.run(
            f"{login.setup} && sbatch --parsable -N 1 -w n1 --gres=gpu:1 -J mine "
            "-o /dev/null --wrap 'sleep 150'"
        )
        assert mine.exit_status == 0, mine.stderr
        ids.append(mine.stdout.strip().partition(";")[0])
        theirs = subprocess.run(
            ["sbatch", "--parsable", "-N", "1", "-w", "n2", "--gres=gpu:1", "-J", "theirs",
             "-o", "/dev/null", "--wrap", "sleep 150"],
            env=slurm.env, capture_output=True, text=True, cwd="/tmp",
        )  # fmt: skip
        assert theirs.returncode == 0, theirs.stderr
        ids.append(theirs.stdout.strip().partition(";")[0])

        app = DistConsoleApp(inventory, settings=make_settings(monitor_interval_s=0.5))
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.press("g")
            screen = app.screen
            assert isinstance(screen, ClusterScreen) and not screen.dense

            def sampled() -> bool:
                found = panel(screen, "n1")
                view = found.view if found is not None else None
                return bool(view and view.live and view.sample and view.sample.gpus)

            await until(pilot, sampled, "n1's panel shows its GPU, sampled through srun")
            n1, n2 = panel(screen, "n1"), panel(screen, "n2")
            assert n1 is not None and n2 is not None
            assert n1.host.tags == (SLURM_ONLY_TAG,)
            assert "n1 · up · slurm-only" in str(n1.border_title)
            assert f"via srun (job {ids[0]})" in (n1.view.reason if n1.view else "")
            assert "H200" in n1.render().plain  # the stand-in's captured GPU
            # root's job on n2: no step of ours may join it, so Slurm's word is all.
            assert "slurm-only" in str(n2.border_title)
            assert n2.view is not None and n2.view.reason == SLURM_ONLY_REASON
            assert {j.user for j in app.store.slurm["n2"]} == {"root"}
            summary = str(screen.query_one("#cluster-summary", Static).render())
            assert "3 hosts" in summary, summary

            await pilot.press("v")  # the dense view draws them too
            await pilot.pause()
            assert screen.dense
            assert {"n1", "n2", login.name} <= set(screen.grid.grid.where)
            text = "\n".join(screen.grid.line_text(i) for i in range(len(screen.grid.grid.lines)))
            assert "n1" in text and "n2" in text
            legend = str(screen.query_one("#grid-legend", Static).render())
            assert "slurm-only (not in the inventory): n1, n2" in legend, legend
            screen.grid.set_cursor("n2")  # Enter opens its detail: Slurm's jobs on it
            await pilot.press("enter")
            await pilot.pause()
            detail = app.screen
            assert isinstance(detail, HostDetailScreen) and detail.host.name == "n2"
            header = str(detail.query_one("#detail-host", Static).render())
            assert f"Slurm: slurm {ids[1]} root theirs: RUNNING" in header, header
    finally:
        for slurm_id in ids:
            subprocess.run(["scancel", slurm_id], env=slurm.env, capture_output=True)
        await pool.close()
