"""jobctl on a host (issue 29 follow-ups): ``watch`` waits on its stdin with selectors,
and a closed stdin (no console reads it) ends the watch instead of a traceback; a
supervisor's pid file counts only while that pid's command line is the job's, since a
host killed whole and back hands its pids to other processes (another user's too)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from console.hostprogs.jobctl.common import SUPERVISOR_PID
from console.inventory import Host
from console.jobs.ssh.remote_ops import jobctl_command

HOST = Host(name="h", address="local", python=sys.executable, setup="false # not run")


def jobctl(op: str, args: Mapping[str, object], *, closed_stdin: bool = False) -> tuple[int, str]:
    """The helper as the runner ships it, run by a real bash (``0<&-``: stdin closed)."""
    command = jobctl_command(HOST, op, args)
    done = subprocess.run(
        ["bash", "-c", ("exec 0<&-; " if closed_stdin else "") + command],
        input=None if closed_stdin else "",
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A live process group that is nothing of the job (its argv names no job id)."""
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield child
    child.kill()
    child.wait()


def test_watch_with_its_stdin_closed_ends_quietly(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    job_dir = tmp_path / "job-x"
    job_dir.mkdir()
    (job_dir / "worker-0.pgid").write_text(f"{sleeper.pid}\n")  # a running process
    args = {"job_id": "job-x", "job_dir": str(job_dir), "names": ["worker-0"]}
    status, said = jobctl("watch", args, closed_stdin=True)
    assert status == 0 and "Traceback" not in said, said
    records = [json.loads(line) for line in said.splitlines()]
    assert {"proc": "worker-0", "running": True, "pgid": sleeper.pid} in records
    # With stdin open (a console reading), it watches on until its stdin ends.
    status, said = jobctl("watch", args)
    assert status == 0 and "Traceback" not in said, said


def test_a_supervisor_pid_counts_only_while_its_command_line_is_the_jobs(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    job_dir = tmp_path / "job-y"
    job_dir.mkdir()
    (job_dir / "supervisor.json").write_text(json.dumps({"state": "running", "host": "h"}))
    args = {"job_id": "job-y", "job_dir": str(job_dir), "names": []}

    def supervisor() -> dict[str, object]:
        status, said = jobctl("inspect", args)
        assert status == 0, said
        record: dict[str, object] = json.loads(said.splitlines()[-1])["supervisor"]
        return record

    # A stale pid: alive, but another process's (sleep 60).
    (job_dir / SUPERVISOR_PID).write_text(f"{sleeper.pid}\n")
    assert supervisor()["alive"] is False
    # A process whose command line names the job's directory, as the supervisor's does.
    ours = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", str(job_dir), "h"]
    )
    try:
        (job_dir / SUPERVISOR_PID).write_text(f"{ours.pid}\n")
        assert supervisor()["alive"] is True
    finally:
        ours.kill()
        ours.wait()
    assert supervisor()["alive"] is False  # gone
