"""Issue 30 (4): a demo host gives a terminal when asked, as sshd does. The console's rank
shell (``!``) runs ``ssh -t``: bash then runs on a PTY that is its controlling terminal
(``tty`` names it, job control is on), and the shell's exit status comes back. The real
OpenSSH client against the in-process demo cluster (real SSH servers on loopback)."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from console import inventory as inventory_module
from console.transport.demo import DemoCluster

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="no ssh client")

SCRIPT = (
    b"tty\n"
    # Printed from values bash computes: the echo of the typed line does not match them.
    b"case $- in *m*) echo JOB$((1+1))CONTROL;; esac\n"
    b"sleep 0 & wait; echo BG$((2+2))DONE\n"
    b"exit 7\n"
)


async def test_a_terminal_session_has_a_pty_with_job_control() -> None:
    async with DemoCluster(1) as cluster:
        host = inventory_module.load(cluster.inventory_path).hosts[0]
        argv = [
            "ssh", "-tt", "-F", "/dev/null", "-o", "BatchMode=yes",
            "-o", f"UserKnownHostsFile={host.known_hosts}", "-o", "StrictHostKeyChecking=yes",
            "-i", str(host.identity_file), "-p", str(host.port), f"{host.user}@{host.address}",
        ]  # fmt: skip
        ssh = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(ssh.communicate(SCRIPT), 60)
        text = out.decode(errors="replace")
        assert "/dev/pts/" in text and "not a tty" not in text, text
        assert "no job control" not in text and "JOB2CONTROL" in text, text
        assert "BG4DONE" in text, text
        assert ssh.returncode == 7, text
