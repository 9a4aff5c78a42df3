"""The one setup composer (``console/transport/ship.py``), run for real in bash and sh.

Every program sent to a host joins the host's ``setup`` line to its command through
``with_setup``; these run the composed lines in real shells (the login shell of a test
host may be bash or a plain POSIX sh) and the job wrapper for real.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from console.inventory import Host
from console.jobs.models import JobKind, JobPlan, RankLaunch
from console.jobs.ssh.remote_ops import SETUP_FAILED, wrapper_script
from console.transport.ship import HostProgram, shipment, with_setup

SHELLS = ["bash", "sh"]


def run(shell: str, line: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [shell, "-c", line], capture_output=True, text=True, timeout=30, check=False
    )


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(
    "setup",
    [
        "export X=set  # py3.11",  # a trailing comment
        "export X=set;",  # a trailing ;
        "true && export X=set",  # && inside
        "export X=unset\nexport X=set",  # several lines
        "export X=set   ",  # trailing blanks
        "if true; then export X=set; fi # done",
    ],
)
def test_the_command_runs_after_setup_in_the_same_shell(shell: str, setup: str) -> None:
    done = run(shell, with_setup(setup, 'echo "X=$X"'))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "X=set\n"


@pytest.mark.parametrize("shell", SHELLS)
def test_a_failing_setup_stops_the_line_with_its_status(shell: str) -> None:
    done = run(shell, with_setup("echo before; (exit 3)  # comment", "echo command-ran"))
    assert done.returncode == 3
    assert done.stdout == "before\n"


@pytest.mark.parametrize("shell", SHELLS)
def test_on_failure_runs_then_the_command_follows(shell: str) -> None:
    line = with_setup("false # x", "echo command-ran", on_failure='echo "failed with $?"')
    assert run(shell, line).stdout == "failed with 1\ncommand-ran\n"
    line = with_setup("true # x", "echo command-ran", on_failure='echo "failed with $?"')
    assert run(shell, line).stdout == "command-ran\n"


def test_no_setup_is_the_command_as_is() -> None:
    assert with_setup(None, "exec x") == "exec x"
    assert with_setup("", "exec x") == "exec x"
    assert with_setup("   ", "exec x") == "exec x"


def test_bash_wraps_the_whole_line() -> None:
    line = with_setup("source /dev/null # bash only", 'echo "$BASH_VERSION" | cut -c1', bash=True)
    assert line.startswith("bash -c ")
    done = run("sh", line)  # a login shell that is not bash still gets `source`
    assert done.returncode == 0 and done.stdout.strip().isdigit()


@pytest.mark.parametrize("shell", SHELLS)
def test_shipment_sends_the_source_on_stdin_or_keeps_stdin(shell: str, tmp_path: Path) -> None:
    host = Host(name="h", address="local", setup="export GREETING=hi  # comment")
    on_stdin = HostProgram(
        "t", "import os, sys; print(os.environ['GREETING'], sys.argv[1:])", ("a b",)
    )
    sent = shipment(host, on_stdin, exec_=True)
    done = subprocess.run(
        [shell, "-c", sent.command], input=sent.stdin, capture_output=True, text=True, check=False
    )
    assert done.stdout == "hi ['a b']\n", done.stderr
    keeps = HostProgram("t", "import sys; print(sys.stdin.read().upper())", (), stdin="payload")
    sent = shipment(host, keeps, setup=False)
    assert "GREETING" not in sent.command
    done = subprocess.run(
        [shell, "-c", sent.command], input=sent.stdin, capture_output=True, text=True, check=False
    )
    assert done.stdout == "PAYLOAD\n", done.stderr


def _launch(tmp_path: Path) -> tuple[JobPlan, RankLaunch]:
    job_dir = str(tmp_path / "job")
    launch = RankLaunch(
        host="node0",
        role="worker",
        index=0,
        argv=("echo", "program-ran"),
        env={},
        cwd=str(tmp_path),
        log_paths=(),
    )
    plan = JobPlan(
        job_id="j-1", name="j", kind=JobKind.DDP, world_size=1, launches=(launch,),
        job_dirs={"node0": job_dir}, master_addr="127.0.0.1", master_port=29500,
        total_steps=1, steps_per_rank=1, steps_dropped=0, hosts_involved=("node0",),
        warnings=(), uploads=(), fail_fast=True,
    )  # fmt: skip
    (tmp_path / "job").mkdir()
    return plan, launch


@pytest.mark.parametrize(
    ("setup", "status", "ran"),
    [
        ("true  # ok, with a comment", 0, True),
        ("true;", 0, True),
        ("false  # fails, with a comment", SETUP_FAILED, False),
        ("true && false", SETUP_FAILED, False),
    ],
)
def test_job_wrapper_records_126_when_setup_fails(
    tmp_path: Path, setup: str, status: int, ran: bool
) -> None:
    plan, launch = _launch(tmp_path)
    host = Host(name="node0", address="local", setup=setup)
    script = wrapper_script(host, plan.job_id, launch, plan.job_dirs["node0"])
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == status
    job = tmp_path / "job"
    assert (job / "worker-0.exit").read_text() == f"{status}\n"
    assert ("program-ran" in (job / "worker-0.out").read_text()) is ran
    if not ran:
        assert "the host setup line failed" in (job / "worker-0.err").read_text()


def test_a_second_term_while_the_wrapper_records_the_status_still_leaves_the_exit_file(
    tmp_path: Path,
) -> None:
    """Fail-fast's TERM, then a PS stop's TERM to the same group while the wrapper moves
    its ``.exit`` file into place: the file must still appear (followers wait for it).
    ``mv`` is made slow (a stand-in that sleeps, then runs the real one) to hold that
    window open."""
    plan, launch = _launch(tmp_path)
    launch = dataclasses.replace(launch, argv=("sleep", "30"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    slow_mv = bin_dir / "mv"
    slow_mv.write_text(f'#!/bin/sh\nsleep 1\nexec {shutil.which("mv")} "$@"\n')
    slow_mv.chmod(0o755)
    script = wrapper_script(
        Host(name="node0", address="local"), plan.job_id, launch, plan.job_dirs["node0"]
    )
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.Popen(["bash", "-c", script], env=env, start_new_session=True)
    out = tmp_path / "job" / "worker-0.out"
    deadline = time.monotonic() + 10
    while (
        "sleep"
        not in subprocess.run(
            ["ps", "-o", "comm=", "-g", str(proc.pid)], capture_output=True, text=True
        ).stdout
    ):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGTERM)
    time.sleep(0.4)  # the wrapper is in its slow mv now
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=10) == 143
    assert (tmp_path / "job" / "worker-0.exit").read_text() == "143\n"
    assert out.exists()
