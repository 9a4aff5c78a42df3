"""``--env NAME`` (the console's own value), ``--env-file FILE`` and the same in the
launch form (issue 29 item 5): secrets that never need to be typed on a command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from console.errors import JobSpecError
from console.jobs.spec_env import job_environment, parse_env, read_env_file
from console.ui.screens.launch_fields import form_to_spec

CONSOLE_ENV = {"HF_TOKEN": "hf_s3cr3t", "EMPTY": ""}


def test_a_name_alone_is_the_consoles_own_value() -> None:
    assert parse_env(["HF_TOKEN", "A=1", "EMPTY"], CONSOLE_ENV) == {
        "HF_TOKEN": "hf_s3cr3t",
        "A": "1",
        "EMPTY": "",
    }


def test_a_name_unset_in_the_console_is_an_error_naming_it() -> None:
    with pytest.raises(JobSpecError) as info:
        parse_env(["NOT_THERE"], CONSOLE_ENV)
    assert info.value.field == "env"
    assert "NOT_THERE is not set in this console's environment" in info.value.detail
    with pytest.raises(JobSpecError, match="valid environment variable name"):
        parse_env(["9X"], CONSOLE_ENV)


def test_an_env_file_reads_name_value_lines(tmp_path: Path) -> None:
    path = tmp_path / "job.env"
    path.write_text(
        "# secrets for the job\n"
        "\n"
        "PLAIN=a b=c\n"
        "  export QUOTED='x y'  \n"
        'DOUBLE="z"\n'
        "HF_TOKEN\n"
        "EMPTY=\n"
    )
    assert read_env_file(path, CONSOLE_ENV) == {
        "PLAIN": "a b=c",
        "QUOTED": "x y",
        "DOUBLE": "z",
        "HF_TOKEN": "hf_s3cr3t",
        "EMPTY": "",
    }


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("A=1\n9BAD=2\n", "line 2: '9BAD' is not a valid environment variable name"),
        ("# c\nMISSING\n", "line 2: MISSING is not set in this console's environment"),
        (b"A=1\nB=\xff\n", "line 2: not UTF-8 text"),
    ],
)
def test_env_file_errors_name_the_file_and_the_line(
    tmp_path: Path, text: str | bytes, words: str
) -> None:
    path = tmp_path / "bad.env"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(JobSpecError) as info:
        read_env_file(path, CONSOLE_ENV)
    assert info.value.field == "--env-file"
    assert info.value.detail.startswith(f"{path}, ") and words in info.value.detail


def test_a_missing_env_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(JobSpecError, match=r"no\.env: No such file"):
        read_env_file(tmp_path / "no.env")


def test_env_files_first_then_env_items(tmp_path: Path) -> None:
    one = tmp_path / "one.env"
    one.write_text("A=file\nB=file\n")
    two = tmp_path / "two.env"
    two.write_text("B=two\n")
    assert job_environment(["A=option"], [one, two], CONSOLE_ENV) == {"A": "option", "B": "two"}


def test_the_launch_forms_environment_takes_names_and_env_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DC_FORM_SECRET", "from-the-console")
    monkeypatch.delenv("DC_FORM_UNSET", raising=False)
    path = tmp_path / "form.env"
    path.write_text("FROM_FILE=1\n")
    values = {"kind": "ddp", "hosts": (), "program": "example:ddp"}
    spec, errors = form_to_spec({**values, "env": f"DC_FORM_SECRET --env-file={path} X=2"})
    assert errors == {} and spec is not None
    assert spec.env == {"FROM_FILE": "1", "DC_FORM_SECRET": "from-the-console", "X": "2"}
    spec, errors = form_to_spec({**values, "env": "DC_FORM_UNSET"})
    assert spec is None and "DC_FORM_UNSET is not set" in errors["env"]
    spec, errors = form_to_spec({**values, "env": f"--env-file {tmp_path}/none.env"})
    assert spec is None and errors["env"].startswith("--env-file: ") and "none.env" in errors["env"]


def cli_plan(
    tmp_path: Path, *options: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text("hosts:\n  - name: local\n    address: localhost\n")
    return subprocess.run(
        [sys.executable, "-m", "console", "plan", str(inventory), "--kind", "ddp", "--json",
         *options, "--", "python3", "-c", "pass"],
        env={**os.environ, "DISTCONSOLE_DATA_DIR": str(tmp_path / "data"), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip


def test_the_cli_takes_env_name_and_env_file_and_names_the_option(tmp_path: Path) -> None:
    path = tmp_path / "job.env"
    path.write_text("FROM_FILE=v1\n")
    ok = cli_plan(
        tmp_path, "--env", "DC_CLI_SECRET", "--env-file", str(path), env={"DC_CLI_SECRET": "s1"}
    )
    assert ok.returncode == 0, ok.stderr
    assert '"DC_CLI_SECRET": "s1"' in ok.stdout and '"FROM_FILE": "v1"' in ok.stdout
    unset = cli_plan(tmp_path, "--env", "DC_CLI_UNSET", env={})
    assert unset.returncode == 2 and "--env: DC_CLI_UNSET is not set" in unset.stderr
    path.write_text("GOOD=1\nnot a line\n")
    bad = cli_plan(tmp_path, "--env-file", str(path), env={})
    assert bad.returncode == 2 and f"--env-file: {path}, line 2: " in bad.stderr, bad.stderr
