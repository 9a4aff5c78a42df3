"""The written conventions, enforced: ruff format, ruff check, mypy and the import contract
(pyproject.toml's [tool.importlinter]) run on the tree as part of the test command, with the
pinned tool versions from the test extra. Each check is also run on a deliberately bad copy
so that a check that silently passes everything would fail here."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{name} is not installed in {BIN}: pip install -e '.[test]'")
    return str(path)


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)


def _explain(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"


def test_ruff_format_is_clean() -> None:
    result = _run([_tool("ruff"), "format", "--check", "."], ROOT)
    assert result.returncode == 0, "run `ruff format .`\n" + _explain(result)


def test_ruff_lint_is_clean() -> None:
    result = _run([_tool("ruff"), "check", "."], ROOT)
    assert result.returncode == 0, "run `ruff check --fix .`\n" + _explain(result)


@pytest.mark.slow
def test_mypy_is_clean() -> None:
    result = _run([_tool("mypy"), "--python-executable", sys.executable], ROOT)
    assert result.returncode == 0, _explain(result)


def test_import_contract_is_kept() -> None:
    result = _run([_tool("lint-imports"), "--no-cache"], ROOT)
    assert result.returncode == 0, _explain(result)


@pytest.fixture
def bad_tree(tmp_path: Path) -> Path:
    """A copy of pyproject.toml and the package with one violation of each kind added."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(
        ROOT / "console", tmp_path / "console", ignore=shutil.ignore_patterns("__pycache__")
    )
    (tmp_path / "console" / "guardrail_bad.py").write_text(
        "import os,sys\n"  # format + lint (unsorted, unused)
        "def untyped(x):\n"  # mypy: disallow_untyped_defs
        "    return x\n"
    )
    # The core reaching up into the UI breaks both import contracts.
    (tmp_path / "console" / "jobs" / "guardrail_layer.py").write_text(
        "from __future__ import annotations\n\nimport console.ui.app\nimport textual\n\n"
        "__all__ = ['console', 'textual']\n"
    )
    return tmp_path


def test_the_checks_fail_on_a_deliberately_bad_tree(bad_tree: Path) -> None:
    assert _run([_tool("ruff"), "format", "--check", "console"], bad_tree).returncode != 0
    assert _run([_tool("ruff"), "check", "console"], bad_tree).returncode != 0
    contracts = _run([_tool("lint-imports"), "--no-cache"], bad_tree)
    assert contracts.returncode != 0
    assert "console.jobs.guardrail_layer" in contracts.stdout
    typed = _run(
        [
            _tool("mypy"),
            "--python-executable",
            sys.executable,
            "--no-incremental",
            "console/guardrail_bad.py",
        ],
        bad_tree,
    )
    assert typed.returncode != 0 and "guardrail_bad.py" in typed.stdout, _explain(typed)
