"""No reader dies on bytes, on real OpenSSH sshd hosts (issue 29 item 3's done-when).

No GPU and no readable kernel log here: the host's PATH starts with the nvidia-smi
STAND-IN (``tests/standin/nvidia-smi``) replaying a copy of the real H200 capture whose
GPU name holds an invalid UTF-8 byte and escapes, and the journalctl STAND-IN
(``tests/standin/journal/journalctl``) writing a kernel log with a line of invalid
UTF-8 beside an Xid 79 on that GPU's PCI address (a test user cannot read this
machine's kernel log: dmesg_restrict).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gpu_standin import readable_standin_dir
from sshd_cluster import SETUP_LINE, SshdCluster

pytestmark = pytest.mark.sshd

STANDIN = readable_standin_dir()
DATA = STANDIN.parent / "data" / "nvidia-smi"
ODD_NAME = b"NVIDIA H200 \xff\x1b]0;owned\x07\x1b[2J"
KERNEL_LOG = (
    b"@NOW@ node0 kernel: usb 1-1: \xff\xfe\xc3\x28 not UTF-8\n"
    b"@NOW@ node0 kernel: NVRM: Xid (PCI:0000:83:00): 79, pid=1234, GPU has fallen off the bus.\n"
)
# A ~/.bashrc that greets: colours, a window title, and no newline before our output.
GREETING = r"""printf 'Welcome to \033[1;32mnode1\033[0m!\n\033]0;node1\007'
printf '\033[2J{"program": "fake", "v": 0}'
"""


@pytest.fixture
def readable_dir() -> Iterator[Path]:
    """A folder the hosts' users can read (a test's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="distconsole-bytes-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def dc(data: Path, *argv: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(data))
    return subprocess.run(
        [sys.executable, "-m", "console", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_xid_79_beside_invalid_utf8_fails_the_gpu_whose_odd_name_prints_plain(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path, readable_dir: Path
) -> None:
    cluster = sshd_cluster(n=1)
    query = (DATA / "csv_h200_query-gpu.csv").read_bytes()
    (readable_dir / "odd_query-gpu.csv").write_bytes(query.replace(b"NVIDIA H200", ODD_NAME))
    shutil.copy(DATA / "csv_h200_compute-apps.csv", readable_dir / "odd_compute-apps.csv")
    (readable_dir / "kernel.log").write_bytes(KERNEL_LOG)
    for path in readable_dir.iterdir():
        path.chmod(0o644)
    setup = (
        f"{SETUP_LINE} && export PATH={STANDIN}:{STANDIN / 'journal'}:$PATH "
        f"NVSMI_STANDIN_CAPTURE={readable_dir / 'odd'} "
        f"JOURNALCTL_STANDIN_OUTPUT={readable_dir / 'kernel.log'}"
    )
    inventory = cluster.write_inventory(tmp_path / "hosts.yaml", setup=setup)

    done = dc(tmp_path, "health", str(inventory), "--json", timeout=90)
    assert done.returncode == 1, (done.stdout, done.stderr)
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    (gpu,) = [r for r in rows if r["gpu"] == 0]
    assert gpu["state"] == "fail", rows
    assert any(r.startswith("Xid 79 (GPU has fallen off the bus) at ") for r in gpu["reasons"])

    table = dc(tmp_path, "gpus", str(inventory), timeout=90)
    assert table.returncode == 0, table.stderr
    assert "\x1b" not in table.stdout and "\x07" not in table.stdout
    assert "GPU 0  NVIDIA H200 \ufffd" in table.stdout, table.stdout


def test_a_greeting_in_bashrc_breaks_neither_logs_nor_report(
    sshd_cluster: Callable[..., SshdCluster], tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=2)
    node1 = cluster.host("node1")
    bashrc = node1.home / ".bashrc"
    bashrc.write_text(GREETING)
    os.chown(bashrc, node1.uid, node1.gid)
    inventory = str(cluster.inventory_path)
    data = tmp_path / "data"

    launched = dc(
        data, "launch", inventory, "--kind", "ddp", "--gpus-per-host", "1", "--name", "greeted",
        "--", "example:ddp", "--steps", "5",
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    assert "disconnected" not in launched.stderr, launched.stderr
    found = re.search(r"job (\S+) succeeded", launched.stderr)
    assert found, launched.stderr
    job_id = found[1]

    logs = dc(data, "logs", inventory, job_id, timeout=120)
    assert logs.returncode == 0, logs.stderr
    assert "disconnected" not in logs.stderr, logs.stderr
    ranks = {line.split("|", 1)[0] for line in logs.stdout.splitlines() if "|" in line}
    assert {"node0 r0", "node1 r1"} <= ranks, logs.stdout
    assert "Welcome" not in logs.stdout and "\x1b]" not in logs.stdout

    # Beside it on node0: a job.json cut short, and one whose name is a lone surrogate
    # escape (valid JSON, not UTF-8 text). A console with an empty history lists the
    # real job and names both files.
    node0 = cluster.host("node0")
    jobs_root = node0.home / "distconsole" / ".distconsole" / "jobs"
    document = (jobs_root / job_id / "job.json").read_text()
    bad = {
        "cut-20260101-000000-aaaaaa": document[: len(document) // 2],
        "odd-20260101-000000-bbbbbb": document.replace(
            job_id, "odd-20260101-000000-bbbbbb"
        ).replace('"name": "greeted"', '"name": "greeted \\udc80"'),
    }
    assert "\\udc80" in bad["odd-20260101-000000-bbbbbb"]
    for name, text in bad.items():
        (jobs_root / name).mkdir(mode=0o700)
        (jobs_root / name / "job.json").write_text(text)
        for path in (jobs_root / name, jobs_root / name / "job.json"):
            os.chown(path, node0.uid, node0.gid)
    fresh = dc(tmp_path / "fresh", "jobs", inventory)
    assert fresh.returncode == 0, fresh.stderr
    assert job_id in fresh.stdout and "odd-" not in fresh.stdout, fresh.stdout
    for name in bad:
        assert f"/{name}/job.json left out: " in fresh.stderr, fresh.stderr
    assert "Traceback" not in fresh.stderr

    out = tmp_path / "report"
    made = dc(data, "report", inventory, job_id, "--out", str(out), timeout=120)
    assert made.returncode == 0, made.stderr
    host_files = {p.name for p in (out / "hosts" / "node1").iterdir()}
    assert {"job.json", "torchrun-1.sh", "torchrun-1.out"} <= host_files, host_files
    assert "step" in (out / "hosts" / "node1" / "torchrun-1.out").read_text()
    assert "Welcome" not in (out / "hosts" / "node1" / "torchrun-1.out").read_text()
