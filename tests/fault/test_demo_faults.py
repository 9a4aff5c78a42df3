"""The demo cluster's in-process SSH hosts (console/transport/demo.py) under the same
faults as the scripted server: a command the console gives up on must end there too,
as it does under OpenSSH's sshd (which delivers the channel's KILL signal)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from console.errors import CommandTimeout
from console.inventory import load
from console.transport import ClusterConnections
from console.transport.demo import DemoCluster

pytestmark = pytest.mark.timeout(30)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_timed_out_command_is_killed_on_a_demo_host(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    async with (
        DemoCluster(hosts=1, directory=tmp_path / "demo") as cluster,
        ClusterConnections(load(cluster.inventory_path), ssh_config=[]) as pool,
    ):
        await pool.wait_settled(timeout=10)
        with pytest.raises(CommandTimeout):
            await pool["node0"].run(f"echo $$ > {pid_file}; exec sleep 30", timeout=0.5)
        pid = int(pid_file.read_text())
        for _ in range(25):
            if not alive(pid):
                break
            await asyncio.sleep(0.02)
        assert not alive(pid), "the command outlived the console's KILL"
