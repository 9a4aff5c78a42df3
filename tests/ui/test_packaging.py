"""The installed package ships the themes (console.themes from the top-level themes/ folder)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_directory_is_listed_in_pyproject() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "console").rglob("__init__.py")
    }
    missing = sorted(on_disk - listed)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"
    assert "console.themes" in listed
    assert (ROOT / "themes" / "__init__.py").is_file()


@pytest.mark.slow
def test_non_editable_install_ships_and_loads_the_themes(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "tests"
        ),
    )
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(source),
        ],
        check=True,
        cwd=tmp_path,
    )
    scratch = tmp_path / "venv"
    venv.create(scratch, with_pip=False)
    python = scratch / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (wheel,) = wheels.glob("distconsole-*.whl")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            purelib,
            str(wheel),
        ],
        check=True,
        cwd=tmp_path,
    )
    # The scratch venv holds only distconsole; its dependencies come from the test venv.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([purelib, sysconfig.get_paths()["purelib"]])}
    probe = (
        "import console, console.ui.theming as t; "
        "print(console.__file__); print(' '.join(x.name for x in t.bundled_themes()))"
    )
    out = subprocess.run(
        [python, "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path, env=env
    ).stdout.split("\n")
    assert out[0].startswith(purelib), out
    assert out[1].split() == ["distconsole-dark", "distconsole-light"]
