"""A hung nvidia-smi on a real sshd host ends when the console that started its sampler
exits (issue 29 item 6: it was left running for good).

No GPU here: the host's PATH starts with the GPU STAND-IN that never answers
(``tests/standin/hung/nvidia-smi``, ``exec sleep 300``), as nvidia-smi on a GPU after
Xid 79 does. The console is ``distconsole gpus --watch``, killed outright (no clean-up of
its own): sshd closes the session and the sampler must take its children along.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from gpu_standin import readable_standin_dir
from sshd_cluster import SETUP_LINE, SshdCluster

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(180)]

STANDIN = readable_standin_dir()


def sleeping(cluster: SshdCluster) -> list[psutil.Process]:
    out = []
    for process in cluster.processes_of("node0"):
        try:
            if process.name() == "sleep":
                out.append(process)
        except psutil.NoSuchProcess:
            continue
    return out


def test_hung_nvidia_smi_ends_after_the_console_is_killed(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=1)
    path = cluster.write_inventory(
        tmp_path / "hosts.yaml", setup=f"{SETUP_LINE} && export PATH={STANDIN / 'hung'}:$PATH"
    )
    console = subprocess.Popen(
        [sys.executable, "-m", "console", "gpus", str(path), "--watch", "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        # The stream (-lms) and the GPU-processes query hang on the host.
        while len(sleeping(cluster)) < 2:
            assert console.poll() is None, "the console ended"
            assert time.monotonic() < deadline, "no hung nvidia-smi on node0 within 60 s"
            time.sleep(0.2)
        console.send_signal(signal.SIGKILL)
        console.wait(timeout=30)
    finally:
        console.kill()
        console.wait()
    started = time.monotonic()
    while sleeping(cluster) and time.monotonic() - started < 30:
        time.sleep(0.2)
    left = sleeping(cluster)
    for process in left:
        process.kill()
    print(f"the host's hung nvidia-smi ended {time.monotonic() - started:.1f} s after the kill")
    assert not left, f"left running on node0 after the console was killed: {left}"
