"""`distconsole` imports only the sub-command it runs: `import console.cli`, `--version`
and `--help` load none of asyncssh, textual, torch or the command modules; the one-line
helps in cli.COMMANDS are those each command's register() gives. Behaviour, not timing:
checked in a fresh interpreter by what sys.modules holds."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from console import cli

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("asyncssh", "textual", "rich", "torch", "pydantic")

PROBE = """
import json, sys
from console import cli
{run}
print(json.dumps(sorted(m for m in sys.modules
                        if m.split(".")[0] in {heavy!r} or m.startswith("console.commands."))))
"""


def loaded_after(run: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(run=run, heavy=HEAVY)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_importing_the_cli_loads_no_command_and_no_heavy_library() -> None:
    assert loaded_after("") == []


def test_version_and_help_load_no_command() -> None:
    for argv in (["--version"], ["--help"]):
        run = f"""
import contextlib, io
with contextlib.redirect_stdout(io.StringIO()):
    try:
        cli.main({argv!r})
    except SystemExit:
        pass
"""
        assert loaded_after(run) == [], argv


def test_running_a_command_loads_that_command_only() -> None:
    run = """
try:
    cli.main(["gpus", "--help"])
except SystemExit:
    pass
"""
    commands = [m for m in loaded_after(run) if m.startswith("console.commands.")]
    assert "console.commands.gpus" in commands
    assert not {"console.commands.launch", "console.commands.ui", "console.commands.demo"} & set(
        commands
    )


def test_top_level_help_lists_every_command_with_its_own_help() -> None:
    def helps(parser: argparse.ArgumentParser) -> dict[str, str]:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return {c.dest: str(c.help) for c in sub._choices_actions}

    assert helps(cli.build_parser()) == cli.COMMANDS  # every module registered
    assert helps(cli.build_parser("")) == cli.COMMANDS  # the lazy table
    done = subprocess.run(
        [sys.executable, "-m", "console", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    for name in cli.COMMANDS:
        assert f"    {name} " in done.stdout


def test_a_hosts_file_alone_opens_the_ui_command() -> None:
    parser = cli.build_parser("ui")
    args = parser.parse_args(["ui", "sample_hosts/two-nodes.yaml"])
    assert args.command == "ui" and callable(args.func)
