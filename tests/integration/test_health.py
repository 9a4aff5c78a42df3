"""`distconsole health` (and `gpus`) on real OpenSSH sshd hosts (issue 24's done-when).

No GPU here: each host's PATH starts with a GPU STAND-IN. node0 replays an altered copy
of the real H200 capture with two uncorrectable ECC errors and a row remap pending
(``csv_h200-faults``, see tests/data/nvidia-smi/SOURCES.md), node1 the capture as taken;
in the hung case node0's nvidia-smi is ``tests/standin/hung/nvidia-smi``, which never
answers (as nvidia-smi on a GPU after Xid 79 does).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpu_standin import readable_standin_dir
from sshd_cluster import SETUP_LINE, SshdCluster

pytestmark = pytest.mark.sshd

STANDIN = readable_standin_dir()
FAULTS = STANDIN.parent / "data" / "nvidia-smi" / "csv_h200-faults"


def inventory(cluster: SshdCluster, tmp_path: Path, node0_setup: str) -> Path:
    """Both hosts on the stand-in; node0 with its own setup line."""
    path = cluster.write_inventory(
        tmp_path / "hosts.yaml", setup=f"{SETUP_LINE} && export PATH={STANDIN}:$PATH"
    )
    text = path.read_text()
    node0 = "  - name: node0\n"
    assert node0 in text
    path.write_text(text.replace(node0, f"{node0}    setup: {json.dumps(node0_setup)}\n"))
    return path


def cli(*argv: str, timeout: float = 90) -> tuple[int, Any, float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "console", *argv], capture_output=True, text=True, timeout=timeout
    )
    took = time.monotonic() - started
    try:
        return done.returncode, json.loads(done.stdout), took
    except json.JSONDecodeError as exc:
        raise AssertionError(f"not JSON: {done.stdout!r} {done.stderr!r}") from exc


def test_health_json_fails_the_faulty_gpu_and_not_the_other_host(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=2)
    setup = f"{SETUP_LINE} && export PATH={STANDIN}:$PATH NVSMI_STANDIN_CAPTURE={FAULTS}"
    path = inventory(cluster, tmp_path, setup)
    status, rows, _ = cli("health", str(path), "--json")
    assert status == 1, rows
    by_host = {(r["host"], r["gpu"]): r for r in rows}
    assert set(by_host) == {("node0", 0), ("node1", 0)}, rows
    bad = by_host[("node0", 0)]
    assert bad["state"] == "fail" and isinstance(bad["since"], float)
    assert "2 uncorrectable ECC error(s) since the last reset" in bad["reasons"]
    assert "row remap pending (reset the GPU)" in bad["reasons"]
    assert by_host[("node1", 0)] == {
        "host": "node1",
        "gpu": 0,
        "state": "ok",
        "reasons": [],
        "since": None,
    }
    # The table says the same, failing GPUs first.
    table = subprocess.run(
        [sys.executable, "-m", "console", "health", str(path)],
        capture_output=True,
        text=True,
        timeout=90,
    )
    lines = table.stdout.splitlines()
    assert table.returncode == 1 and lines[1].startswith("node0") and "fail" in lines[1]
    assert lines[-1] == "1 fail, 0 warn, 1 ok"


def test_a_host_whose_nvidia_smi_never_answers(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=2)
    path = inventory(cluster, tmp_path, f"{SETUP_LINE} && export PATH={STANDIN / 'hung'}:$PATH")
    status, rows, took = cli("health", str(path), "--json")
    assert took < 60, f"health took {took:.0f}s"
    assert status == 1
    (node0,) = [r for r in rows if r["host"] == "node0"]
    assert node0["gpu"] is None and node0["state"] == "fail"
    assert any("not answering" in r for r in node0["reasons"]), node0
    assert [(r["gpu"], r["state"]) for r in rows if r["host"] == "node1"] == [(0, "ok")]

    status, hosts, took = cli("gpus", str(path), "--json")
    assert took < 60, f"gpus took {took:.0f}s"
    node0_view, node1_view = hosts
    assert node0_view["gpus"] == [] and "not answering" in node0_view["gpu_error"]
    assert node1_view["gpus"][0]["name"] == "NVIDIA H200"


def launch(tmp_path: Path, path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(tmp_path / "data"))
    argv = ["launch", str(path), "--kind", "ddp", "--gpus-per-host", "1", *extra]
    return subprocess.run(
        [sys.executable, "-m", "console", *argv, "--", "example:ddp", "--steps", "3"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


def test_launch_onto_the_failing_gpu_is_refused_and_excluded_on_request(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=2)
    setup = f"{SETUP_LINE} && export PATH={STANDIN}:$PATH NVSMI_STANDIN_CAPTURE={FAULTS}"
    path = inventory(cluster, tmp_path, setup)
    refused = launch(tmp_path, path)
    assert refused.returncode == 1, refused.stderr
    assert (
        "FAIL [health] node0: GPU 0 fails its health check: 2 uncorrectable ECC error(s) since "
        "the last reset; row remap pending (reset the GPU); launch with --exclude-unhealthy"
    ) in refused.stderr, refused.stderr
    assert "[health] node1" not in refused.stderr
    assert "rank 0" not in refused.stdout  # nothing started

    excluded = launch(tmp_path, path, "--exclude-unhealthy")
    assert excluded.returncode == 0, excluded.stderr
    assert "health: node0 left out: GPU 0 failing and 0 healthy left" in excluded.stderr
    assert any(ln.startswith("[node1 r0] rank 0 ") for ln in excluded.stdout.splitlines())
    assert "[node0" not in excluded.stdout


def test_a_failed_job_names_the_failing_gpu_of_its_host(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=2)
    setup = f"{SETUP_LINE} && export PATH={STANDIN}:$PATH NVSMI_STANDIN_CAPTURE={FAULTS}"
    path = inventory(cluster, tmp_path, setup)
    env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(tmp_path / "data"))
    argv = ["launch", str(path), "--kind", "ddp", "--gpus-per-host", "1", "--allow-unhealthy"]
    program = ["example:ddp", "--steps", "300", "--sleep", "0.05", "--crash-rank", "0"]
    done = subprocess.run(
        [sys.executable, "-m", "console", *argv, "--", *program, "--crash-at-step", "2"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert done.returncode == 1, done.stderr
    assert "WARN [health] node0: GPU 0 fails its health check" in done.stderr
    tail = done.stderr.split("GPU health on the job's hosts:", 1)[1]
    assert (
        "node0 GPU 0: 2 uncorrectable ECC error(s) since the last reset (found when the job ended)"
    ) in tail, done.stderr
    assert "node1" not in tail
    # The report's summary names it too.
    jobs = subprocess.run(
        [sys.executable, "-m", "console", "jobs", str(path), "--json"],
        capture_output=True, text=True, timeout=90, env=env,
    )  # fmt: skip
    (job,) = json.loads(jobs.stdout)
    out = tmp_path / "report"
    subprocess.run(
        [sys.executable, "-m", "console", "report", str(path), job["id"], "--out", str(out)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    summary = (out / "summary.txt").read_text()
    assert "GPU health on the job's hosts:" in summary
    assert (
        "  node0 GPU 0: 2 uncorrectable ECC error(s) since the last reset "
        "(found when this report was made)"
    ) in summary
