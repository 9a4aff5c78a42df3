"""`plan/launch --help` shows one list of every option; `| head` ends quietly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def dc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "console", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


@pytest.mark.parametrize("command", ["plan", "launch"])
@pytest.mark.parametrize("where", [(), ("sample_hosts/two-nodes.yaml",)])
def test_job_command_help_is_one_options_list(command: str, where: tuple[str, ...]) -> None:
    done = dc(command, *where, "--help")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.count("options:") == 1
    assert out.count("--help") == 1
    for option in ("--kind", "--gpus-per-host", "--total-steps", "--interface"):
        assert option in out
    assert "HOSTS is hosts.yaml" in " ".join(out.split())


def test_help_after_the_program_belongs_to_the_program() -> None:
    done = dc("plan", "sample_hosts/two-nodes.yaml", "--kind", "ddp", "--", "train.py", "--help")
    assert done.returncode == 0, done.stderr
    assert "options:" not in done.stdout
    assert "train.py --help" in done.stdout


def test_piping_into_head_ends_quietly() -> None:
    # `plan` prints a few dozen lines; a reader that takes one closes the pipe early.
    line = (
        f"{sys.executable} -m console plan sample_hosts/two-nodes.yaml --kind ddp "
        "--gpus-per-host 8 -- train.py | head -n 1"
    )
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", line],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.stdout.count("\n") == 1
    assert "BrokenPipeError" not in done.stderr and "Traceback" not in done.stderr
    assert done.stderr == ""
