"""The report bundle's steps.csv: every step each rank printed (rank, step, loss, rate)
read back from the rank logs in the bundle, for a real DDP example job on real sshd
hosts (torchrun on two hosts), as `distconsole launch` then `distconsole report` run."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sshd_cluster import SshdCluster

pytestmark = [pytest.mark.sshd, pytest.mark.slow]


def dc(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(data))
    return subprocess.run(
        [sys.executable, "-m", "console", *args], env=env, capture_output=True, text=True,
        timeout=180,
    )  # fmt: skip


def test_report_writes_steps_csv_of_every_rank(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=2)
    inv, data = str(cluster.inventory_path), tmp_path / "data"
    ran = dc(
        data, "launch", inv, "--kind", "ddp", "--gpus-per-host", "1", "--name", "curves",
        "--", "example:ddp", "--steps", "20",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    listed = dc(data, "jobs", inv, "--json")
    [job] = [j for j in json.loads(listed.stdout) if j["name"] == "curves"]
    out = tmp_path / "report"
    made = dc(data, "report", inv, job["id"], "--out", str(out))
    assert made.returncode == 0, made.stderr
    rows = list(csv.DictReader((out / "steps.csv").open()))
    assert rows and list(rows[0]) == ["time", "rank", "step", "loss", "rate"]
    by_rank: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_rank.setdefault(row["rank"], []).append(row)
    assert sorted(by_rank) == ["0", "1"]
    for rank_rows in by_rank.values():
        assert [int(r["step"]) for r in rank_rows] == list(range(1, 21))
        assert all(r["loss"] and float(r["loss"]) >= 0 for r in rank_rows)
        assert all(r["time"] == "" for r in rank_rows)  # files carry no times
        assert all(float(r["rate"]) > 0 for r in rank_rows)  # the example's "steps/s Y"
    assert oct((out / "steps.csv").stat().st_mode & 0o777) == "0o600"
