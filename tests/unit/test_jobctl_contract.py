"""The job helper (``console/hostprogs/jobctl/program.py``) runs on hosts where ``console`` cannot
be imported, so it spells the job directory's file names itself: they must be those of
``console/jobs/paths.py``. Its records, from real runs, decode into the typed reports.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from console.errors import JobError
from console.hostprogs.jobctl import common as jobctl_common
from console.hostprogs.jobctl import program as jobctl
from console.hostprogs.sampler.simulated import JOB_VAR
from console.inventory import Host
from console.jobs import paths
from console.jobs.ssh import jobctl_reports as reports
from console.jobs.ssh.remote_ops import jobctl_command
from console.names import JOB_ID_VAR
from console.transport.hello import HostProgramError


def test_file_names_are_the_paths_modules() -> None:
    assert jobctl_common.PGID_SUFFIX == paths.PGID_SUFFIX
    assert jobctl_common.MACHINE_SUFFIX == paths.MACHINE_SUFFIX
    assert jobctl_common.EXIT_SUFFIX == paths.EXIT_SUFFIX
    assert jobctl_common.WRAPPER_SUFFIX == paths.WRAPPER_SUFFIX
    assert jobctl_common.STOP_REQUESTED == paths.STOP_REQUESTED
    assert jobctl_common.MARKER == JOB_VAR == JOB_ID_VAR


def test_no_follow_operation_ships_any_more() -> None:
    assert set(jobctl.OPS) == {
        "start",
        "watch",
        "inspect",
        "stop",
        "free-port",
        "host-lost",
        "host-ended",
    }
    assert "op_follow" not in Path(jobctl.__file__).read_text()
    assert "op_follow" not in Path(jobctl_common.__file__).read_text()


def _run(op: str, args: Mapping[str, object] | None = None) -> str:
    """The helper as the runner ships it (``jobctl_command``), run by a real bash."""
    host = Host(name="h", address="local", python=sys.executable, setup="false # not run")
    done = subprocess.run(
        ["bash", "-c", jobctl_command(host, op, args)],
        input="",
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_real_runs_decode_into_typed_reports(tmp_path: Path) -> None:
    out = _run("free-port")
    assert out.splitlines()[0] == f'{{"program": "jobctl", "v": {jobctl.VERSION}}}'
    port = reports.free_port(reports.one_shot("h", "free-port", out)).port
    assert 0 < port < 65536
    (tmp_path / "worker-0.exit").write_text("3\n")
    (tmp_path / "worker-0.pgid").write_text("999999\n")
    os.utime(tmp_path / "worker-0.exit", (1_700_000_000.5, 1_700_000_000.5))
    args = {"job_id": "j", "job_dir": str(tmp_path), "names": ["worker-0", "ps-0"]}
    found = reports.inspected(reports.one_shot("h", "inspect", _run("inspect", args)))
    assert found.processes == (
        reports.ProcessReport("worker-0", exit_status=3, pgid=999999, ended_at=1_700_000_000.5),
        reports.ProcessReport("ps-0", missing=True),
    )
    # once a stop was asked for, what ends after it reads as stopped (not as a failure);
    # what had ended before it stays as it was
    (tmp_path / paths.STOP_REQUESTED).write_text("1\n")
    found = reports.inspected(reports.one_shot("h", "inspect", _run("inspect", args)))
    assert [p.stop_requested for p in found.processes] == [False, True]
    os.utime(tmp_path / paths.STOP_REQUESTED, (1_700_000_000.0, 1_700_000_000.0))
    found = reports.inspected(reports.one_shot("h", "inspect", _run("inspect", args)))
    assert [p.stop_requested for p in found.processes] == [True, True]


def test_a_helper_of_another_version_is_refused() -> None:
    with pytest.raises(HostProgramError, match=r"node3: jobctl: speaks wire version 99"):
        reports.one_shot("node3", "inspect", '{"program": "jobctl", "v": 99}\n{"processes": []}\n')
    with pytest.raises(HostProgramError, match=r"node3: jobctl: .*versioned hello"):
        reports.one_shot("node3", "inspect", '{"processes": []}\n')  # an older helper
    with pytest.raises(JobError, match="printed no result"):
        reports.one_shot("node3", "inspect", "Traceback ...\n")
    reader = reports.JobctlReader("node3")
    assert reader.read(f'{{"program": "jobctl", "v": {jobctl.VERSION}}}') is None
    record = reader.read('{"proc": "worker-0", "running": true, "pgid": 12}')
    assert record is not None
    assert reports.watch_record(record) == reports.ProcessReport("worker-0", True, pgid=12)
    assert reports.watch_record({"done": True}) == reports.WatchDone()


def test_free_port_with_a_span_names_a_base_whose_whole_range_is_free() -> None:
    # A Ray job on 3 hosts uses P..P+5 (plan_ray.port_count): all six must be free.
    out = _run("free-port", {"span": 6})
    port = reports.free_port(reports.one_shot("h", "free-port", out)).port
    assert port + 5 <= 65535
    with contextlib.ExitStack() as held:
        for candidate in range(port, port + 6):
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("", candidate))  # raises if one of the range was taken
