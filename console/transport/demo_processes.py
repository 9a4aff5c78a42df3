"""Ending the demo cluster's processes, like powering its hosts off.

Every process a demo host starts carries the cluster's token (and its host's name) in
its environment, which is how they are found, even after ``setsid`` detached them.
"""

from __future__ import annotations

import contextlib
import os
import time

import psutil

HOST_ENV = "DISTCONSOLE_DEMO_HOST"
# Marks every process of one cluster (inherited by descendants) so stop() can find them.
CLUSTER_ENV = "DISTCONSOLE_DEMO_CLUSTER"


def end_processes(token: str, host: str | None) -> None:
    """SIGTERM, then SIGKILL, every live process carrying this cluster's (and host's) mark."""
    mine: list[psutil.Process] = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
        except (psutil.Error, OSError):
            continue  # gone, or another user's process: not ours either way
        if env.get(CLUSTER_ENV) == token and (host is None or env.get(HOST_ENV) == host):
            mine.append(proc)
    for proc in mine:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    alive = _wait_gone(mine, timeout=3)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    _wait_gone(alive, timeout=3)


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Those still alive after ``timeout``. Our own children (the sessions' shells) are
    only polled: asyncio's child watcher reaps them, and reaping them here as well makes
    it warn "Unknown child process". Others are waited for until they are reaped."""
    deadline = time.monotonic() + timeout
    ours = [p for p in procs if _parent_pid(p) == os.getpid()]
    _, alive = psutil.wait_procs([p for p in procs if p not in ours], timeout=timeout)
    while ours:
        ours = [p for p in ours if _running(p)]
        if not ours or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return [*alive, *ours]


def _parent_pid(proc: psutil.Process) -> int | None:
    try:
        return proc.ppid()
    except psutil.Error:
        return None


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
