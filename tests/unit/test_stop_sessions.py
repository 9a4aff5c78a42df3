"""A job process's children that leave its process group (Ray's workers: a group of
their own, a new name, a blank environment, so neither the group nor the job marker
finds them) are still in the session the process leads: ``jobctl stop`` and the
supervisor's stop reach them there. Real processes, the real helper."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.hostprogs.supervisor.local import SvLocal
from console.jobs.ssh.remote_ops import jobctl_source

JOB_ID = "job-sessions-test"
# Leads a session (as jobctl start starts every job process), then starts a child that
# moves to a process group of its own and runs with an empty environment.
LEADER = """\
import os, subprocess, sys, time
child = subprocess.Popen(
    [sys.executable, "-c",
     "import os, time; os.setpgid(0, 0); open(os.environ.get('X', '') or %r, 'w')"
     ".write(str(os.getpid())); time.sleep(120)" % sys.argv[1]],
    env={},
)
time.sleep(120)
"""


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.fixture
def job(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes], int]]:
    """A job directory recording one process ``worker-0`` (a session and group leader,
    marked with the job's id) whose child sits in a group of its own inside the session."""
    child_file = tmp_path / "child.pid"
    leader = subprocess.Popen(
        [sys.executable, "-c", LEADER, str(child_file)],
        start_new_session=True,
        env=dict(os.environ, DISTCONSOLE_JOB_ID=JOB_ID),
    )
    deadline = time.monotonic() + 30
    while not (child_file.exists() and child_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(child_file.read_text())
    assert os.getpgid(child) == child != leader.pid
    assert os.getsid(child) == leader.pid
    with open(f"/proc/{child}/environ", "rb") as handle:
        assert handle.read() == b""  # the marker cannot find it
    (tmp_path / "worker-0.pgid").write_text(f"{leader.pid}\n")
    yield tmp_path, leader, child
    for pid in (child, leader.pid):
        if pid_alive(pid):
            os.kill(pid, 9)
    leader.wait()


def wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not pid_alive(pid)


def test_jobctl_stop_ends_a_group_made_inside_the_session(
    job: tuple[Path, subprocess.Popen[bytes], int],
) -> None:
    job_dir, leader, child = job
    done = subprocess.run(
        [sys.executable, "-c", jobctl_source(), "stop",
         json.dumps({"job_id": JOB_ID, "job_dir": str(job_dir), "names": ["worker-0"],
                     "grace": 2})],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["remaining"] == [], report
    assert leader.wait(timeout=10) != 0
    assert wait_gone(child), f"{child} in the job's session outlived the stop"


def test_the_supervisors_stop_ends_a_group_made_inside_the_session(
    job: tuple[Path, subprocess.Popen[bytes], int],
) -> None:
    job_dir, leader, child = job
    local = SvLocal(str(job_dir), JOB_ID, [{"name": "worker-0"}])
    local.stop(grace=2.0)
    assert leader.wait(timeout=10) != 0
    assert wait_gone(child), f"{child} in the job's session outlived the stop"
    assert local.leftovers() == []
