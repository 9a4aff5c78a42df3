"""hosts.yaml: every problem in one pass, each at its own line; typos get a did-you-mean."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from console.errors import InventoryError
from console.inventory import load


def load_error(tmp_path: Path, text: str) -> InventoryError:
    path = tmp_path / "hosts.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    with pytest.raises(InventoryError) as info:
        load(path)
    return info.value


def test_every_problem_is_reported_at_its_own_line(tmp_path: Path) -> None:
    error = load_error(
        tmp_path,
        """
        defaults:
          port: 70000
        hosts:
          - name: a
            address: 10.0.0.1
            gpus: many
          - name: b
            adress: 10.0.0.2
          - name: c
            address: 10.0.0.3
            env: {1BAD: x}
        """,
    )
    where = [(p.line, p.field) for p in error.problems]
    assert where == [
        (2, "defaults.port"),
        (6, "hosts[0].gpus"),
        (8, "hosts[1].adress"),
        (11, "hosts[2].env.1BAD"),
    ]
    lines = str(error).splitlines()
    assert len(lines) == 4 and all(line.startswith(f"{tmp_path}/hosts.yaml:") for line in lines)
    # the first problem stays the error's own fields, as for a file with one problem
    assert (error.line, error.field) == (2, "defaults.port")


def test_an_unknown_key_is_a_did_you_mean_not_a_missing_address(tmp_path: Path) -> None:
    error = load_error(
        tmp_path,
        """
        hosts:
          - name: a
            adress: 10.0.0.1
        """,
    )
    assert [str(p).split(": ", 1)[1] for p in error.problems] == [
        "hosts[0].adress: unknown key; did you mean 'address'?"
    ]
    assert error.line == 3


def test_an_unnamed_host_with_a_misspelt_address_is_one_problem(tmp_path: Path) -> None:
    error = load_error(tmp_path, "hosts:\n  - {adress: 10.0.0.1}\n")
    assert [p.field for p in error.problems] == ["hosts[0].adress"]
    assert "did you mean 'address'?" in str(error)


def test_unknown_top_level_key_gets_a_did_you_mean(tmp_path: Path) -> None:
    error = load_error(tmp_path, "default:\n  port: 22\nhosts:\n  - {address: 10.0.0.1}\n")
    assert str(error).endswith(
        "hosts.yaml:1: default: unknown top-level key; did you mean 'defaults'?"
    )


def test_a_bad_default_is_reported_once_not_once_per_host(tmp_path: Path) -> None:
    error = load_error(
        tmp_path,
        """
        defaults:
          conect_timeout: 5
        hosts:
          - {name: a, address: 10.0.0.1}
          - {name: b, address: 10.0.0.2}
          - {name: c, address: 10.0.0.3}
        """,
    )
    assert [(p.line, p.field) for p in error.problems] == [(2, "defaults.conect_timeout")]
    assert "did you mean 'connect_timeout'?" in str(error)


def test_the_cli_prints_every_problem_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts:\n  - {name: a, address: 10.0.0.1, port: 0}\n  - {name: b, adress: x}\n")
    done = subprocess.run(
        [sys.executable, "-m", "console", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    err = done.stderr.splitlines()
    assert err == [
        f"distconsole check: {path}:2: hosts[0].port: must be between 1 and 65535, got 0",
        f"{path}:3: hosts[1].adress: unknown key; did you mean 'address'?",
    ]
