"""A shell on a rank's host, for real: the argv the console hands the terminal to is run
against a real sshd host with a script on stdin instead of a person (``ssh -tt``), after
the upload of its env file; meanwhile another user (``nobody``) reads every argv."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from sshd_cluster import SshdCluster

from console.errors import JobError
from console.inventory import load
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.jobs.ssh.rank_shell import rank_shell_argv, rank_shell_command
from console.ui.rank_shell_action import SSH_FAILED, with_error_log
from tests.integration.test_secrets_argv import scan_as_nobody
from tests.integration.test_supervisor import wait_for

pytestmark = [pytest.mark.sshd]


TOKEN = "shell-Rv62-secret-value"


def test_the_shell_opens_on_the_ranks_host_in_its_directory_with_its_env(
    sshd_cluster: Callable[..., SshdCluster],
) -> None:
    cluster = sshd_cluster(n=2)
    inventory = load(cluster.inventory_path)
    env = {"JOBVAR": "x y'z", "SHELL_TOKEN": TOKEN}
    spec = make_spec(kind="mpi", program="a.out", gpus_per_host=1, env=env)
    planned = plan(spec, inventory, job_id="shell-1")
    node1 = cluster.host("node1")
    cwd = node1.home / "distconsole"
    cwd.mkdir(exist_ok=True)
    os.chown(cwd, node1.uid, -1)  # the host's user's, as its work directory is
    command = rank_shell_command(inventory, planned, 1)
    argv = command.argv
    assert argv == rank_shell_argv(inventory, planned, 1)
    assert argv[:2] == ["ssh", "-t"] and "StrictHostKeyChecking=yes" in argv
    # As the console's runner does: the env file first, its values on ssh's stdin.
    sent = subprocess.run(command.upload, input=command.env_script, capture_output=True, timeout=60)
    assert sent.returncode == 0, sent.stderr
    env_file = node1.home / command.env_file.removeprefix("~/")
    assert env_file.stat().st_mode & 0o777 == 0o600 and env_file.parent.is_dir()
    # -tt: a terminal is asked for although stdin here is not one. The shell says what
    # it got, then waits for the test's go while another user reads every argv.
    script = (
        'echo "at=$(pwd) user=$(id -un) var=$JOBVAR rank=$DISTCONSOLE_RANK '
        'token=${#SHELL_TOKEN}"; touch up; while [ ! -e go ]; do sleep 0.1; done; exit\n'
    )
    shell = subprocess.Popen(
        ["ssh", "-tt", *argv[2:]],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert shell.stdin is not None
        shell.stdin.write(script)
        shell.stdin.flush()
        wait_for(lambda: (cwd / "up").exists(), timeout=60)
        # The shell's ssh here, sshd's session and the remote shell on the host: none
        # shows the value to another user (it did: `export SHELL_TOKEN=...` in both).
        scan = scan_as_nobody((TOKEN, "StrictHostKeyChecking=yes"))
        (cwd / "go").touch()
        out, err = shell.communicate(timeout=60)
    finally:
        shell.kill()
    assert shell.returncode == 0, err
    found = scan["found"]
    assert [hit for hit in found if hit[0] == TOKEN] == [], found  # type: ignore[union-attr]
    assert any(hit[0] == "StrictHostKeyChecking=yes" for hit in found), found  # type: ignore[union-attr]
    expected = f"at={cwd} user={node1.user} var=x y'z rank=1 token={len(TOKEN)}"
    assert expected in out.replace("\r", ""), out
    # The host key is verified: against a known_hosts without node1 ssh refuses.
    inventory = load(cluster.write_inventory(known_hosts=str(cluster.empty_known_hosts)))
    refused = subprocess.run(
        ["ssh", "-tt", *rank_shell_argv(inventory, planned, 1)[2:]],
        input="exit\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 255 and "Host key verification failed" in refused.stderr
    with pytest.raises(JobError, match="no rank 7"):
        rank_shell_argv(inventory, planned, 7)


def test_ssh_failures_are_kept_for_the_console_to_show(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    # The console's runner adds -E: what ssh says when it fails is kept out of the
    # terminal the console takes back, and shown in its notification.
    cluster = sshd_cluster(n=2)
    inventory = load(cluster.write_inventory(known_hosts=str(cluster.empty_known_hosts)))
    planned = plan(make_spec(kind="mpi", program="a.out", gpus_per_host=1), inventory, job_id="s2")
    log = tmp_path / "ssh.log"
    argv = with_error_log(rank_shell_argv(inventory, planned, 1), str(log))
    done = subprocess.run(["ssh", "-tt", *argv[1:]], input="exit\n", capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == SSH_FAILED
    assert "Host key verification failed" in log.read_text()
