"""What an attached ``launch`` prints when a host of the job stops answering: an
elastic job (--min-hosts) goes on without any host but its leader, whose loss ends the
job (it holds the rendezvous and the leader supervisor), so the line must not promise
that the job goes on then."""

from __future__ import annotations

from console.commands.launch import host_lost_line
from tests.unit.test_first_host_loss import ddp


def test_losing_the_leader_host_says_the_job_ends_not_that_it_goes_on() -> None:
    planned = ddp(min_hosts=2)
    line = host_lost_line(planned, "n0", "n0: connection lost (refused)")
    assert line.startswith("n0: connection lost (refused); this ends the job: n0 holds")
    assert "goes on" not in line and "leader supervisor" in line
    # Any other host: the job goes on while --min-hosts remain.
    other = host_lost_line(planned, "n1", "n1: connection lost (refused)")
    assert (
        other
        == "n1: connection lost (refused); the job goes on without it while --min-hosts 2 remain"
    )
    # The leader is whichever host the plan puts first.
    moved = ddp(min_hosts=2, hosts=["n2", "n0", "n1"])
    assert "this ends the job: n2 holds" in host_lost_line(moved, "n2", "n2: lost")
    assert "goes on without it" in host_lost_line(moved, "n0", "n0: lost")


def test_a_job_without_min_hosts_is_stopped_by_the_other_supervisors() -> None:
    line = host_lost_line(ddp(), "n1", "n1: connection lost (x)")
    assert line == "n1: connection lost (x); the other hosts' supervisors stop the job"
