"""What an MPI job's ranks print reaches the user once, and safely (issue 23 items 2, 3, 8).

Real mpirun across real sshd hosts with per-host users and homes (the fixture's default
cluster, as in ``test_mpi_per_host.py``), driven by the real CLI: an attached
``distconsole launch`` and ``distconsole logs`` (plain, ``--json``, ``--raw``).

- Each rank's line shows once, under its rank and the host it ran on; mpirun's own
  messages (its report of a failed rank) still show as the launcher.
- mpirun is not asked to forward a variable the launcher's environment lacks, so it
  prints no "could not find environment variable" warning.
- A rank's terminal control sequences (a title, a screen clear) do not reach the user's
  terminal; its colours do; ``--raw`` prints everything as it came; ``--json`` escapes.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sshd_cluster import SshdCluster

pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.mpi]

# One write per line (os.write): a line is never cut between two writes. Rank 3 fails
# a moment after printing, so that mpirun has a report of its own to make.
HELLO = """\
import os, sys, time
rank = os.environ["OMPI_COMM_WORLD_RANK"]
line = "hello rank=%s ldlp=%s\\n" % (rank, os.environ.get("LD_LIBRARY_PATH"))
os.write(1, line.encode())
if rank == "3":
    time.sleep(1)
    sys.exit(3)
"""

# A title (OSC ... BEL), a screen clear (CSI 2J), a bell, and colours (SGR).
TITLE = "\x1b]0;retitled-by-rank\x07"
CLEAR = "\x1b[2J"
RED = "\x1b[31mred\x1b[0m"
HOSTILE = f"control {TITLE}{CLEAR}{RED} bell\x07 end"
CONTROLS = f"""\
import os
os.write(1, {HOSTILE!r}.encode() + b"\\n")
"""


def put_program(cluster: SshdCluster, name: str, text: str) -> None:
    for host in cluster.hosts:
        path = host.home / name
        path.write_text(text)
        owner = pwd.getpwnam(host.user)
        os.chown(path, owner.pw_uid, owner.pw_gid)


def dc(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(data))
    return subprocess.run(
        [sys.executable, "-m", "console", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def job_id_of(launched: subprocess.CompletedProcess[str]) -> str:
    found = re.search(r"^distconsole: job (\S+) running", launched.stderr, re.M)
    assert found, launched.stderr
    return found[1]


def test_each_rank_line_shows_once_under_its_rank_and_mpirun_warns_of_nothing_unset(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=2)
    cluster.write_inventory(interface="lo")
    put_program(cluster, "hello.py", HELLO)
    data = tmp_path / "data"
    inv = str(cluster.inventory_path)
    launched = dc(data, "launch", inv, "--kind", "mpi", "--gpus-per-host", "2", "--", "~/hello.py")
    assert launched.returncode == 1, launched.stderr  # rank 3 failed on purpose
    job = job_id_of(launched)
    # The precondition of item 3: the launcher's environment has no LD_LIBRARY_PATH.
    assert all(f"hello rank={r} ldlp=None" in launched.stdout for r in range(4)), launched.stdout

    # Attached launch: each rank's line once, under its rank on its host.
    hosts = {0: "node0", 1: "node0", 2: "node1", 3: "node1"}
    hellos = [ln for ln in launched.stdout.splitlines() if "hello rank=" in ln]
    assert sorted(hellos) == [f"[{hosts[r]} r{r}] hello rank={r} ldlp=None" for r in range(4)], (
        launched.stdout
    )
    assert "could not find environment variable" not in launched.stdout + launched.stderr

    # logs --json: the same four lines, each once, with its rank and host; mpirun's own
    # report is the launcher's.
    out = dc(data, "logs", inv, job, "--json")
    assert out.returncode == 0, out.stderr
    records = [json.loads(ln) for ln in out.stdout.splitlines()]
    said = [rec for rec in records if "hello rank=" in rec["line"]]
    assert sorted((rec["rank"], rec["host"], rec["role"]) for rec in said) == [
        (r, hosts[r], "rank") for r in range(4)
    ], out.stdout
    launcher = [rec["line"] for rec in records if rec["role"] == "launcher"]
    assert launcher, out.stdout
    assert all(rec["rank"] is None for rec in records if rec["role"] == "launcher")
    assert any("non-zero" in line for line in launcher), launcher
    assert not any("could not find environment variable" in line for line in launcher), launcher

    # Plain logs: the same, once each.
    plain = dc(data, "logs", inv, job)
    assert plain.returncode == 0, plain.stderr
    shown = sorted(ln for ln in plain.stdout.splitlines() if "hello rank=" in ln)
    assert shown == [f"{hosts[r]} r{r}| hello rank={r} ldlp=None" for r in range(4)], plain.stdout


def test_a_ranks_control_sequences_stay_off_the_terminal_but_its_colours_do_not(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=1)
    cluster.write_inventory(interface="lo")
    put_program(cluster, "controls.py", CONTROLS)
    data = tmp_path / "data"
    inv = str(cluster.inventory_path)
    launched = dc(
        data, "launch", inv, "--kind", "mpi", "--gpus-per-host", "1", "--", "~/controls.py"
    )
    assert launched.returncode == 0, launched.stderr
    job = job_id_of(launched)
    safe = f"control {RED} bell end"
    for printed in (launched.stdout, dc(data, "logs", inv, job).stdout):
        for control in ("\x1b]", CLEAR, "\x07"):
            assert control not in printed, repr(printed)
        assert f" {safe}\n" in printed, repr(printed)  # the colours kept
    assert f"[node0 r0] {safe}\n" in launched.stdout, repr(launched.stdout)

    raw = dc(data, "logs", inv, job, "--raw")
    assert raw.returncode == 0, raw.stderr
    assert f"node0 r0| {HOSTILE}\n" in raw.stdout, repr(raw.stdout)

    as_json = dc(data, "logs", inv, job, "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert "\x1b" not in as_json.stdout  # escaped: \u001b
    lines = [json.loads(ln)["line"] for ln in as_json.stdout.splitlines()]
    assert HOSTILE in lines, lines

    launched_raw = dc(
        data, "launch", inv, "--kind", "mpi", "--gpus-per-host", "1", "--raw", "--",
        "~/controls.py",
    )  # fmt: skip
    assert launched_raw.returncode == 0, launched_raw.stderr
    assert f"[node0 r0] {HOSTILE}\n" in launched_raw.stdout, repr(launched_raw.stdout)
