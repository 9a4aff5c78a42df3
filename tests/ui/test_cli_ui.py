"""`distconsole HOSTS` / `distconsole ui`: bad input exits 2 before the UI starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from console.ui.theming import theme_choices

ROOT = Path(__file__).resolve().parents[2]


def distconsole(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "console", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "TERM": "dumb"},
        stdin=subprocess.DEVNULL,
    )


def good_inventory(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts:\n  - name: node0\n    address: local\n")
    return path


@pytest.mark.parametrize("form", [["ui"], []])
def test_unknown_theme_exits_2_naming_the_option_and_the_choices(
    tmp_path: Path, form: list[str]
) -> None:
    done = distconsole(*form, str(good_inventory(tmp_path)), "--theme", "solarized-x", cwd=tmp_path)
    assert done.returncode == 2
    assert "--theme" in done.stderr and "solarized-x" in done.stderr
    for choice in ("distconsole-dark", "distconsole-light"):
        assert choice in done.stderr
    assert done.stdout == ""


def test_invalid_inventory_exits_2_with_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "hosts.yaml"
    bad.write_text("hosts:\n  - name: node0\n    address: local\n    port: seventy\n")
    done = distconsole(str(bad), cwd=tmp_path)
    assert done.returncode == 2
    assert f"{bad}:4" in done.stderr and "port" in done.stderr
    assert "\x1b[" not in done.stdout  # the UI never started


def test_missing_inventory_exits_2(tmp_path: Path) -> None:
    done = distconsole("ui", str(tmp_path / "nope.yaml"), cwd=tmp_path)
    assert done.returncode == 2
    assert "nope.yaml" in done.stderr


def test_theme_choices_start_with_the_bundled_themes() -> None:
    choices = theme_choices()
    assert choices[:2] == ["distconsole-dark", "distconsole-light"]
    assert "textual-light" in choices
