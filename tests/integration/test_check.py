"""`distconsole check` as a real subprocess against real OpenSSH sshd hosts on loopback.

The only stand-in is ``nvidia-smi`` (this machine has no GPU): a script that prints a
real capture from an H200 host (tests/data/nvidia-smi/csv_h200_query-gpu.csv).
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sshd_cluster import SETUP_LINE, BlackHole, SshdCluster

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
H200_CAPTURE = ROOT / "tests" / "data" / "nvidia-smi" / "csv_h200_query-gpu.csv"
Factory = Callable[..., SshdCluster]


def check(*args: str, timeout: float = 60) -> tuple[int, str, str, float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "console", "check", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


def check_json(*args: str) -> tuple[int, list[dict[str, Any]], float]:
    code, out, err, elapsed = check(*args, "--json")
    assert code != 2, err
    return code, json.loads(out), elapsed


@pytest.fixture
def gpu_standin() -> Iterator[Path]:
    """A directory (readable by the test users) holding a stand-in ``nvidia-smi``."""
    directory = Path(tempfile.mkdtemp(prefix="distconsole-standin-", dir="/tmp"))
    directory.chmod(0o755)
    capture = directory / "query-gpu.csv"
    shutil.copy(H200_CAPTURE, capture)
    capture.chmod(0o644)
    script = directory / "nvidia-smi"
    # GPU stand-in: replays a real H200 capture for any --query-gpu call.
    script.write_text(f"#!/bin/sh\nexec cat {capture}\n")
    script.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def add_host(inventory: Path, name: str, address: str, port: int) -> None:
    """Append a host entry to a fixture-written hosts.yaml (hosts: is its last key)."""
    with inventory.open("a") as f:
        f.write(f"  - name: {name}\n    address: {address}\n    port: {port}\n")


def test_all_up_reports_facts(sshd_cluster: Factory, gpu_standin: Path, tmp_path: Path) -> None:
    cluster = sshd_cluster(n=2)
    setup = f"{SETUP_LINE} && export PATH={gpu_standin}:$PATH"
    inventory = cluster.write_inventory(tmp_path / "hosts.yaml", setup=setup)
    code, hosts, _ = check_json(str(inventory))
    assert code == 0
    assert [h["name"] for h in hosts] == ["node0", "node1"]
    torch_version = importlib.metadata.version("torch")
    for host, sshd in zip(hosts, cluster.hosts, strict=True):
        assert {
            "name", "state", "reason", "latency_ms", "python", "torch", "gpus", "os", "kernel",
            "cpus", "memory_total_bytes", "disk_free_bytes", "gpu_models", "work_dir",
        } <= set(host)  # fmt: skip
        assert host["state"] == "up" and host["reason"] == ""
        assert host["latency_ms"] > 0
        # the setup line ran first: the venv's python, with torch, answered
        assert host["python_path"].startswith("/opt/distconsole-test/venv/")
        assert host["python"] == ".".join(map(str, sys.version_info[:3]))
        assert host["torch"] == torch_version
        assert host["gpus"] == 1 and host["gpu_models"] == ["NVIDIA H200"]
        assert host["gpu_list"][0]["memory_total_mib"] == 143771.0
        assert host["work_dir"] == str(sshd.home / "distconsole")
        assert (sshd.home / "distconsole").is_dir()  # created when missing
        assert host["disk_free_bytes"] > 0 and host["memory_total_bytes"] > 0
        assert host["cpus"] >= 1 and host["kernel"] and host["os"]
        assert host["facts_via"] == "python"

    code, table, _, _ = check(str(inventory))
    assert code == 0
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["HOST", "STATE", "LATENCY"]
    assert lines[1].split()[:2] == ["node0", "up"] and lines[2].split()[:2] == ["node1", "up"]
    assert "1x NVIDIA H200" in lines[1] and torch_version in lines[1]
    assert lines[-1] == "2/2 hosts up and answering"

    # --host narrows the check to one host
    code, only, _ = check_json(str(inventory), "--host", "node1")
    assert code == 0 and [h["name"] for h in only] == ["node1"]


def test_without_python_the_shell_fallback_answers(
    sshd_cluster: Factory, gpu_standin: Path, tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=1)
    inventory = cluster.write_inventory(
        tmp_path / "hosts.yaml",
        setup=f"export PATH={gpu_standin}:$PATH",
        python="no-such-python3",
        work_dir="~/distconsole/dc check/it's here",
    )
    code, hosts, _ = check_json(str(inventory))
    assert code == 0
    (host,) = hosts
    assert host["facts_via"] == "sh"
    assert host["python"] is None and host["torch"] is None
    assert host["gpus"] == 1 and host["gpu_models"] == ["NVIDIA H200"]
    assert host["work_dir"] == str(cluster.hosts[0].home / "distconsole" / "dc check" / "it's here")
    assert (cluster.hosts[0].home / "distconsole" / "dc check" / "it's here").is_dir()
    assert host["disk_free_bytes"] > 0 and host["memory_total_bytes"] > 0
    code, table, _, _ = check(str(inventory))
    assert "missing" in table.splitlines()[1]  # python and torch shown as missing


def test_failing_setup_line_is_reported(sshd_cluster: Factory, tmp_path: Path) -> None:
    cluster = sshd_cluster(n=1)
    inventory = cluster.write_inventory(
        tmp_path / "hosts.yaml", setup="source /nonexistent/venv/bin/activate"
    )
    code, hosts, _ = check_json(str(inventory))
    assert code == 1
    assert hosts[0]["state"] == "up"
    assert "setup line" in hosts[0]["reason"] and "/nonexistent/venv" in hosts[0]["reason"]


def test_stopped_and_black_holed_hosts_are_down_in_time(
    sshd_cluster: Factory, black_hole: BlackHole, tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=2)
    inventory = cluster.write_inventory(tmp_path / "hosts.yaml", connect_timeout=2)
    add_host(inventory, "hole", black_hole.address, black_hole.port)
    cluster.stop("node1")
    code, hosts, elapsed = check_json(str(inventory))
    assert code == 1
    states = {h["name"]: h for h in hosts}
    assert states["node0"]["state"] == "up" and states["node0"]["python"]
    assert states["node1"]["state"] == "down" and states["node1"]["reason"]
    assert states["hole"]["state"] == "down" and states["hole"]["reason"]
    assert states["node1"]["python"] is None and states["node1"]["gpus"] is None
    # a black-holed host costs its connect_timeout (2 s) and a few seconds, not a hang
    assert elapsed < 2 + 6, elapsed

    # --timeout caps the whole check below the hosts' connect_timeout
    slow = tmp_path / "slow.yaml"
    cluster.write_inventory(slow, connect_timeout=30)
    add_host(slow, "hole", black_hole.address, black_hole.port)
    code, hosts, elapsed = check_json(str(slow), "--timeout", "2")
    assert code == 1
    hole = next(h for h in hosts if h["name"] == "hole")
    assert hole["state"] == "down" and "no answer within 2s" in hole["reason"]
    assert elapsed < 2 + 6, elapsed


def test_unknown_host_key_and_wrong_client_key(sshd_cluster: Factory, tmp_path: Path) -> None:
    cluster = sshd_cluster(n=2)
    unknown = cluster.write_inventory(
        tmp_path / "unknown.yaml", known_hosts=str(cluster.empty_known_hosts)
    )
    code, hosts, _ = check_json(str(unknown))
    assert code == 1
    assert [h["state"] for h in hosts] == ["host-key-rejected", "host-key-rejected"]
    assert all(h["reason"] for h in hosts)

    wrong = cluster.write_inventory(
        tmp_path / "wrong.yaml", identity_file=str(cluster.wrong_identity_file)
    )
    code, hosts, _ = check_json(str(wrong))
    assert code == 1
    assert [h["state"] for h in hosts] == ["auth-failed", "auth-failed"]


def test_invalid_inventory_exits_2_with_file_and_line(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(
        "hosts:\n  - name: a\n    address: 127.0.0.1\n  - name: b\n    address: x\n    port: 0\n"
    )
    code, out, err, _ = check(str(inventory))
    assert code == 2 and out == ""
    assert err.strip() == (
        f"distconsole check: {inventory}:6: hosts[1].port: must be between 1 and 65535, got 0"
    )


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--timeout", "0"], "argument --timeout: must be a number of seconds > 0"),
        (["--timeout", "soon"], "argument --timeout: expected a number of seconds"),
        (["--host", "nope"], "no host named 'nope'"),
        (["--tag", "nope"], "no host has tag nope"),
    ],
)
def test_bad_options_exit_2(args: list[str], fragment: str) -> None:
    code, _, err, _ = check(str(ROOT / "sample_hosts" / "two-nodes.yaml"), *args)
    assert code == 2
    assert fragment in err


def test_a_hanging_host_is_cut_off_by_timeout(tmp_path: Path) -> None:
    # A host that connects but never answers (its setup line hangs), here the local one.
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(
        f"hosts:\n  - name: stuck\n    address: local\n    setup: sleep 30\n"
        f"    work_dir: {tmp_path / 'work'}\n"
    )
    code, hosts, elapsed = check_json(str(inventory), "--timeout", "2")
    assert code == 1
    assert hosts[0]["state"] == "up"
    assert "the facts command did not finish within" in hosts[0]["reason"]
    assert elapsed < 2 + 6, elapsed
