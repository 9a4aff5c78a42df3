"""``jobctl stop`` and the supervisor's stop signal each process of a job once: a
process in one of the job's groups that also carries the job's marker had the TERM
twice (the group's, then its own), and a second TERM landing in torchrun's shutdown
leaves it hung at exit (joining its log threads) until the SIGKILL after the grace.

Runs the real helper (``python3 -c <jobctl> stop JSON``) and the supervisor's
``SvLocal`` against a real process group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.hostprogs.supervisor.local import SvLocal
from console.jobs.ssh.remote_ops import jobctl_source

JOB = "job-stop-signals-test"

# Notes each TERM (and SIGWINCH: see below), one line each, and lives on: only a SIGKILL ends it,
# so every TERM the stop sends is counted.
COUNTER = """
import signal, sys, time
log = sys.argv[1]
def note(number, _frame):
    with open(log, "a") as f:
        f.write(signal.Signals(number).name + "\\n")
signal.signal(signal.SIGTERM, note)
signal.signal(signal.SIGWINCH, note)
with open(log + ".ready", "w"):
    pass
while True:
    time.sleep(0.05)
"""


@pytest.fixture
def counter(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A marked process leading its own group, recorded as ``torchrun-0`` in the job
    directory ``tmp_path``; its TERMs are counted in the yielded file."""
    log = tmp_path / "terms"
    proc = subprocess.Popen(
        [sys.executable, "-c", COUNTER, str(log)],
        env=dict(os.environ, DISTCONSOLE_JOB_ID=JOB),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not Path(f"{log}.ready").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "counter never ready"
            time.sleep(0.02)
        (tmp_path / "torchrun-0.pgid").write_text(f"{proc.pid}\n")
        yield proc, log
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_jobctl_stop_terms_a_marked_process_in_a_job_group_once(
    tmp_path: Path, counter: tuple[subprocess.Popen[bytes], Path]
) -> None:
    proc, log = counter
    args = {"job_id": JOB, "job_dir": str(tmp_path), "grace": 1, "names": ["torchrun-0"]}
    done = subprocess.run(
        [sys.executable, "-c", jobctl_source(), "stop", json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert proc.wait(timeout=30) == -9, done.stdout  # the grace ran out: SIGKILL
    assert log.read_text().splitlines() == ["SIGTERM"]


def test_the_supervisors_stop_terms_a_marked_process_in_a_job_group_once(
    tmp_path: Path, counter: tuple[subprocess.Popen[bytes], Path]
) -> None:
    proc, log = counter
    local = SvLocal(str(tmp_path), JOB, [{"name": "torchrun-0"}])
    local.stop(grace=60)  # the KILL (tick) comes after the count is read
    # Sent after every TERM of the stop, handled after them (pending signals go lowest
    # number first): once it is noted, every TERM is.
    proc.send_signal(signal.SIGWINCH)
    deadline = time.monotonic() + 30
    while "SIGWINCH" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "the counter never noted SIGWINCH"
        time.sleep(0.02)
    assert log.read_text().splitlines() == ["SIGTERM", "SIGWINCH"]
    local.kill()
    assert proc.wait(timeout=30) == -9
