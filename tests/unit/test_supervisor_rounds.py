"""supervisor/rounds.py: a survivor's supervisor stops only its workers still in a round
with the lost host (real process groups standing for torchrun agents and workers, with
the variables torchrun gives each round's workers)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

import psutil

from console.hostprogs.supervisor.rounds import sv_stop_stale_workers, sv_torchrun_workers


def agent(size: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, GROUP_WORLD_SIZE=str(size), TORCHELASTIC_RESTART_COUNT="0")
    return subprocess.Popen(["bash", "-c", "sleep 60 & wait"], env=env, start_new_session=True)


def workers_of(group: int) -> dict[int, tuple[int, int]]:
    deadline = time.monotonic() + 10
    found = sv_torchrun_workers(group)
    while not found and time.monotonic() < deadline:
        time.sleep(0.05)
        found = sv_torchrun_workers(group)
    return found


def test_only_workers_of_a_round_larger_than_the_hosts_left_are_stopped() -> None:
    old, new = agent(3), agent(2)  # a round with the lost host; one of the survivors
    try:
        [(old_worker, old_round)] = workers_of(old.pid).items()
        [(new_worker, new_round)] = workers_of(new.pid).items()
        assert (old_round, new_round) == ((0, 3), (0, 2))
        assert sv_stop_stale_workers([old.pid, new.pid], 2) == [old_worker]
        old.wait(timeout=10)  # its worker ended, so its wait returned
        assert psutil.Process(new_worker).is_running()
        assert sv_stop_stale_workers([new.pid], 2) == []  # nothing larger: nothing stopped
    finally:
        for proc in (old, new):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
