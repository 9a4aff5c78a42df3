"""The job helper on a shared (NFS) home: every host sees every host's job files.

Runs the real helper (``python3 -c <jobctl> OP JSON``) against real process groups.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.jobs.ssh.remote_ops import jobctl_source

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def jobctl(op: str, args: dict[str, object], stdin: str = "") -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", jobctl_source(), op, json.dumps(args)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.fixture
def group() -> Iterator[subprocess.Popen[bytes]]:
    """A real process group (a sleep leading its own session), killed afterwards."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def stop_unnamed(job_dir: Path) -> None:
    """``stop`` as the console sends it to a host that started nothing itself (an MPI
    rank host): no names, so only what the job directory shows."""
    jobctl("stop", {"job_id": "job-shared-home-test", "job_dir": str(job_dir), "grace": 1})


@pytest.mark.skipif(not BOOT_ID.exists(), reason="no /proc boot id on this system")
def test_stop_leaves_another_machines_process_group_alone(
    tmp_path: Path, group: subprocess.Popen[bytes]
) -> None:
    # What launcher-0 on another host left in the shared job directory: its pgid means
    # some unrelated group of the same user on this machine.
    (tmp_path / "launcher-0.pgid").write_text(f"{group.pid}\n")
    (tmp_path / "launcher-0.machine").write_text("another-machine-boot-id\n")
    stop_unnamed(tmp_path)
    assert group.poll() is None, "a process group recorded on another machine was killed"
    # Recorded on this machine: the same discovery does stop it.
    (tmp_path / "launcher-0.machine").write_text(BOOT_ID.read_text())
    stop_unnamed(tmp_path)
    assert group.wait(timeout=10) != 0


def test_stop_still_stops_groups_recorded_before_machine_files(
    tmp_path: Path, group: subprocess.Popen[bytes]
) -> None:
    (tmp_path / "launcher-0.pgid").write_text(f"{group.pid}\n")
    stop_unnamed(tmp_path)
    assert group.wait(timeout=10) != 0


def test_start_records_the_machine_and_writes_uploads_whole(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    example = job_dir / "example_x.py"
    data = b"print('x')\n" * 1000
    payload = {
        "job_dir": str(job_dir),
        "uploads": [{"path": str(example), "data": base64.b64encode(data).decode()}],
        "dirs": [],
        "processes": [{"name": "launcher-0", "script": "exit 0\n"}],
    }
    # Two hosts sharing the home start at once: both write the same upload.
    for _host in range(2):
        jobctl("start", {}, stdin=json.dumps(payload))
    assert example.read_bytes() == data
    assert not list(job_dir.glob("*.tmp"))
    if BOOT_ID.exists():
        assert (job_dir / "launcher-0.machine").read_text() == BOOT_ID.read_text()


def test_hosts_writing_one_job_file_at_once_do_not_trip_each_other(tmp_path: Path) -> None:
    """Every host's ``stop`` writes ``stop-requested`` into the one shared job directory
    at once: the helper's atomic write, as shipped, from four processes in a loop."""
    target = tmp_path / "stop-requested"
    writer = (
        jobctl_source().split("\nOPS = {")[0]  # the helper's functions, not its main
        + "\nfor i in range(300):\n    write_atomic(sys.argv[1], str(i))\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", writer, str(target)], stderr=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    errors = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
    assert target.read_text() == "299"
    assert [p.name for p in tmp_path.iterdir()] == ["stop-requested"]  # no temporary left
