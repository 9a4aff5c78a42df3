"""``distconsole logs`` of a job that ends or has ended, on real sshd hosts with their own
users: ``--follow`` stops once the supervisors recorded the end and says how it ended;
a plain read says the same on stderr, also from a machine whose history never saw the job
(the plan comes from the hosts)."""

from __future__ import annotations

import re

import pytest

from tests.integration.test_jobs_cli import assert_nothing_left, dc
from tests.integration.test_supervisor import launch_loops

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

# worker-1 (a PS job's task: no rank) on whichever host placement gave it.
ENDED = re.compile(
    r"^job ended: failed \(node\d worker-1 failed: exit status 3\) at \d\d:\d\d:\d\d$"
)


def test_logs_of_an_ended_job_say_how_it_ended(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    inv = str(cluster.inventory_path)
    job_id = launch_loops(tmp_path, cluster, crash=True)

    # Followed while it runs: worker-1 exits 3, the supervisors stop the rest, and the
    # follow ends with the verdict as its last line.
    followed = dc(tmp_path, "logs", inv, job_id, "--follow", "--since-start")
    assert followed.returncode == 0, followed.stderr
    lines = followed.stdout.splitlines()
    assert any(line.endswith("| up worker-1") for line in lines), followed.stdout
    assert ENDED.match(lines[-1]), followed.stdout[-2000:]
    assert_nothing_left(cluster)

    # Ended: --follow prints what is there and the same last line instead of waiting.
    again = dc(tmp_path, "logs", inv, job_id, "--follow")
    assert again.returncode == 0, again.stderr
    assert any(line.endswith("| crashing now") for line in again.stdout.splitlines())
    assert again.stdout.splitlines()[-1] == lines[-1]

    # Another machine (an empty history): the hosts give the plan and the verdict; the
    # lines stay on stdout, the verdict goes to stderr.
    elsewhere = dc(tmp_path / "elsewhere", "logs", inv, job_id)
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert any(line.endswith("| up worker-0") for line in elsewhere.stdout.splitlines())
    assert not any(line.startswith("job ended") for line in elsewhere.stdout.splitlines())
    assert elsewhere.stderr.splitlines()[-1] == lines[-1], elsewhere.stderr
