"""Ctrl-C ends the long-running commands with exit status 130, as `logs --follow` and
`launch` do (docs/troubleshooting.md): each is a real `distconsole` process, sent SIGINT
once it has said it is running."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.sshd_cluster import SshdCluster

REPO = Path(__file__).resolve().parents[2]
READY_S = 90  # the first sample or connection, under the load of a shared CI machine


def local_inventory(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(
        f"hosts:\n  - name: here\n    address: local\n    work_dir: {tmp_path / 'work'}\n"
    )
    return path


def interrupt_once_ready(argv: list[str], tmp_path: Path, ready: str) -> tuple[int, str]:
    """Run ``distconsole ARGV`` until a stdout line contains ``ready``, then SIGINT it."""
    env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(tmp_path / "data"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "console", *argv],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        seen = ""
        while ready not in seen:
            readable, _, _ = select.select([proc.stdout], [], [], READY_S)
            line = proc.stdout.readline() if readable else ""
            assert line, f"no {ready!r} from {argv}: {proc.stderr.read() if proc.stderr else ''}"
            seen = line
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


def test_metrics_exits_130_after_ctrl_c(tmp_path: Path) -> None:
    argv = ["metrics", str(local_inventory(tmp_path)), "--listen", "127.0.0.1:0"]
    status, err = interrupt_once_ready(argv, tmp_path, "serving http://127.0.0.1:")
    assert status == 130, err
    assert "Traceback" not in err


def test_gpus_watch_exits_130_after_ctrl_c(tmp_path: Path) -> None:
    argv = ["gpus", str(local_inventory(tmp_path)), "--watch", "--json", "--interval", "0.5"]
    status, err = interrupt_once_ready(argv, tmp_path, '"here"')
    assert status == 130, err
    assert "Traceback" not in err


@pytest.mark.sshd
def test_forward_exits_130_after_ctrl_c(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=1)
    path = cluster.write_inventory(tmp_path / "hosts.yaml")
    argv = ["forward", str(path), "node0:6006"]
    status, err = interrupt_once_ready(argv, tmp_path, "-> node0 localhost:6006")
    assert status == 130, err
    assert "Traceback" not in err
