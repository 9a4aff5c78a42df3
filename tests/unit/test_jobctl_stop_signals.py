"""``jobctl stop`` signals each process of a job once: a process in one of the job's
groups that also carries the job's marker had the TERM twice (the group's, then its
own), and a second TERM landing in torchrun's shutdown leaves it hung at exit (joining
its log threads) until the SIGKILL after the grace.

Runs the real helper (``python3 -c <jobctl> stop JSON``) against a real process group.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from console.jobs.ssh.remote_ops import jobctl_source

JOB = "job-stop-signals-test"

# Counts its TERMs (one line each) and lives on: only the SIGKILL after the grace ends it,
# so every TERM the stop sends is counted.
COUNTER = """
import signal, sys, time
log = sys.argv[1]
def note(*_):
    with open(log, "a") as f:
        f.write("TERM\\n")
signal.signal(signal.SIGTERM, note)
with open(log + ".ready", "w"):
    pass
while True:
    time.sleep(0.05)
"""


def test_a_marked_process_in_a_job_group_gets_one_term(tmp_path: Path) -> None:
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
        args = {"job_id": JOB, "job_dir": str(tmp_path), "grace": 1, "names": ["torchrun-0"]}
        done = subprocess.run(
            [sys.executable, "-c", jobctl_source(), "stop", json.dumps(args)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert proc.wait(timeout=30) == -9, done.stdout  # the grace ran out: SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert log.read_text().splitlines() == ["TERM"]
