"""A shell on a rank's host, for real: the argv the console hands the terminal to is run
against a real sshd host with a script on stdin instead of a person (``ssh -tt``)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from sshd_cluster import SshdCluster

from console.errors import JobError
from console.inventory import load
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.jobs.ssh.rank_shell import rank_shell_argv
from console.ui.rank_shell_action import SSH_FAILED, with_error_log

pytestmark = [pytest.mark.sshd]


def test_the_shell_opens_on_the_ranks_host_in_its_directory_with_its_env(
    sshd_cluster: Callable[..., SshdCluster],
) -> None:
    cluster = sshd_cluster(n=2)
    inventory = load(cluster.inventory_path)
    spec = make_spec(kind="mpi", program="a.out", gpus_per_host=1, env={"JOBVAR": "x y'z"})
    planned = plan(spec, inventory, job_id="shell-1")
    node1 = cluster.host("node1")
    (node1.home / "distconsole").mkdir(exist_ok=True)
    argv = rank_shell_argv(inventory, planned, 1)
    assert argv[:2] == ["ssh", "-t"] and "StrictHostKeyChecking=yes" in argv
    # -tt: a terminal is asked for although stdin here is not one.
    script = 'echo "at=$(pwd) user=$(id -un) var=$JOBVAR rank=$DISTCONSOLE_RANK"; exit\n'
    done = subprocess.run(
        ["ssh", "-tt", *argv[2:]], input=script, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    expected = f"at={node1.home}/distconsole user={node1.user} var=x y'z rank=1"
    assert expected in done.stdout.replace("\r", ""), done.stdout
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
