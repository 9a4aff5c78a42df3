"""`report`'s summary.txt names the same root cause as `launch`'s failure block, on real
sshd hosts: torchrun's root cause (the rank that failed first, with its own last words),
and the inventory's name of its host, not torchrun's ``localhost``."""

from __future__ import annotations

import re

import pytest

from tests.integration.test_jobs_cli import assert_nothing_left, dc, jobs_json

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

ROOT_CAUSE = re.compile(r"^root cause: rank 2 on (\S+): exit status 3 at \S+$", re.M)
CRASH = "[default0]:rank 2 crashing at step 5 as asked"


def cause_block(text: str) -> list[str]:
    """From the root cause line to the failed process's last lines (not included)."""
    start = ROOT_CAUSE.search(text)
    assert start is not None, text
    block = text[start.start() :].split("last lines of its output:", 1)[0]
    return block.rstrip("\n").splitlines()


def test_the_report_heads_with_launchs_root_cause_on_the_inventory_host(
    sshd_cluster, tmp_path
) -> None:
    """2 hosts x 2 ranks, rank 2 (node1's first) exits 3; its peers fail after it."""
    cluster = sshd_cluster(n=2)
    result = dc(
        tmp_path, "launch", str(cluster.inventory_path), "--kind", "ddp", "--gpus-per-host",
        "2", "--", "example:ddp", "--steps", "300", "--sleep", "0.05",
        "--crash-rank", "2", "--crash-at-step", "5",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    launched = cause_block(result.stderr)
    named = ROOT_CAUSE.match(launched[0])
    assert named is not None and named.group(1) == "node1", result.stderr
    assert CRASH in launched, result.stderr
    [job] = jobs_json(tmp_path, cluster.inventory_path)
    out = tmp_path / "report"
    made = dc(tmp_path, "report", str(cluster.inventory_path), job["id"], "--out", str(out))
    assert made.returncode == 0, made.stderr
    summary = (out / "summary.txt").read_text()
    # The first failure is told as launch told it: the process, then the root cause with
    # rank 2's own words, then its last lines.
    assert re.search(
        r"^first failure: node1 torchrun-1 \(rank 2\) failed: exit status", summary, re.M
    )
    reported = cause_block(summary)
    assert reported == launched, (summary, result.stderr)
    head = summary.split("processes:", 1)[0]
    assert head.index("root cause: rank 2 on node1") < head.index("last lines of its output:")
    # (torchrun's own report, in the last lines, still says "localhost": its words.)
    assert not re.search(r"root cause: .* on localhost", summary), summary
    assert_nothing_left(cluster)
