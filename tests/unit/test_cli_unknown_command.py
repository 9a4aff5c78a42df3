"""A mistyped sub-command is named as one, not read as an inventory file (issue 23 item
10): the real CLI in a subprocess, in a directory holding a real hosts.yaml."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[2] / "sample_hosts" / "local.yaml"


def dc(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "console", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


@pytest.fixture
def here(tmp_path: Path) -> Path:
    shutil.copy(SAMPLE, tmp_path / "hosts.yaml")
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "meant"),
    [
        (("gpu", "hosts.yaml"), "gpus"),
        (("lauch",), "launch"),
        (("lgos", "hosts.yaml", "JOB"), "logs"),
        (("chek", "hosts.yaml"), "check"),
    ],
)
def test_a_mistyped_command_gets_did_you_mean_and_exit_2(
    here: Path, argv: tuple[str, ...], meant: str
) -> None:
    done = dc(here, *argv)
    assert done.returncode == 2, done.stderr
    first = done.stderr.splitlines()[0]
    assert first == f"distconsole: unknown command {argv[0]!r}; did you mean {meant!r}?"
    assert "unrecognized arguments" not in done.stderr
    assert "file not found" not in done.stderr
    assert done.stdout == ""


def test_a_word_like_no_command_lists_the_commands(here: Path) -> None:
    done = dc(here, "xyzzy")
    assert done.returncode == 2
    first = done.stderr.splitlines()[0]
    assert first.startswith("distconsole: unknown command 'xyzzy'; commands: check, gpus, ")
    assert "did you mean" not in first


def test_a_missing_file_is_still_a_missing_file(here: Path) -> None:
    done = dc(here, "hots.yaml")
    assert done.returncode == 2
    assert done.stderr.strip() == "distconsole ui: hots.yaml: file not found"


def test_an_existing_file_of_any_name_is_an_inventory(here: Path) -> None:
    # A host_file named like a word: it exists, so it is read as one (`--help` of `ui`
    # shows which parser took it without opening the console).
    shutil.copy(SAMPLE, here / "gpu")
    done = dc(here, "gpu", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: distconsole ui ")
