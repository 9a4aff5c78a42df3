"""Every command and option the README and docs/*.md show exists, so they cannot drift.

A `distconsole SUB ...` in a code block, or an inline code span that starts with a
sub-command (`` `logs --follow` ``), names SUB's options: each must be an option of SUB's
real parser (console/cli.py's, with the job commands' inner parser), up to a bare ``--``
(what follows is the program's). Every other ``--option`` the pages show must be some
sub-command's option or one of another tool's listed below (torchrun, mpirun, pip, ...).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from console.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Options the pages show of programs that are not distconsole, or of distconsole's host
# files and environment; a new one is added here on purpose, not by accident.
OTHER_TOOLS = {
    # torchrun / torch
    "--nnodes", "--nproc-per-node", "--node-rank", "--master-addr", "--master-port",
    "--max-restarts", "--rdzv-backend", "--rdzv-endpoint", "--rdzv-id", "--local-addr",
    "--rdzv-conf", "--tee",
    # nvidia-smi, py-spy, ruff
    "--query-gpu", "--nonblocking", "--check",
    # mpirun, horovodrun, srun, sbatch, ray
    "--mca", "--map-by", "--allow-run-as-root", "--gloo", "--mpi", "--network-interface",
    "--host-discovery-script", "--min-np", "--max-np", "--blacklist-cooldown-range",
    "--reset-limit", "--kill-on-bad-exit", "--output", "--requeue", "--overlap", "--jobid",
    "--json", "--head", "--block", "--address", "--node-ip-address", "--num-gpus",
    "--object-store-memory", "--temp-dir", "--qos", "--constraint", "--partition",
    "--account", "--time", "--ntasks",
    # git, pip, python benches and scripts
    "--cached", "--others", "--exclude-standard", "--no-cache-dir", "--hosts", "--repeat",
    "--duration", "--demo", "--no-sshd", "--rate", "--modes", "--max-lines", "--rtt-ms",
    "--interval", "--python", "--scenario", "--crash-at", "--sleep", "--fixed", "--baseline",
    # the bundled examples' own options
    "--crash-rank", "--crash-at-step", "--crash-once", "--epochs", "--lr",
}  # fmt: skip

OPTION = re.compile(r"(?<![\w/.=-])--[a-zA-Z][\w-]*")
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
SHELL = ("", "sh", "bash", "shell", "console")  # a ```text block is output, not commands
INLINE = re.compile(r"`([^`\n]+)`")


@cache
def parsers() -> dict[str, set[str]]:
    """Sub-command -> every option string its parser accepts."""
    root = build_parser()
    sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    found: dict[str, set[str]] = {"": {o for a in root._actions for o in a.option_strings}}
    for name, parser in sub.choices.items():
        options: set[str] = set()
        stack = [parser]
        while stack:
            current = stack.pop()
            for action in current._actions:
                options.update(action.option_strings)
                inner = getattr(action, "inner", None)  # plan/launch/export's job options
                if isinstance(inner, argparse.ArgumentParser):
                    stack.append(inner)
        found[name] = options
    return found


def commands_in(text: str) -> Iterator[tuple[str, str]]:
    """(sub-command, the words after it) for each command the text shows."""
    for language, block in FENCE.findall(text):
        if language not in SHELL:
            continue
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" # ", 1)[0]
            for part in re.split(r"\||&&|;", line):
                words = part.split()
                if "distconsole" in words:
                    yield _command(words[words.index("distconsole") + 1 :])
    prose = FENCE.sub("", text)
    for span in INLINE.findall(prose):
        words = span.split()
        if words and words[0] == "distconsole":
            words = words[1:]
        elif not words or words[0] not in COMMANDS or len(words) == 1:
            continue
        yield _command(words)


def _command(words: list[str]) -> tuple[str, str]:
    if not words:
        return "", ""
    first = words[0]
    if first.endswith(":") and first[:-1] in COMMANDS:
        return first[:-1], ""  # a message it printed (`distconsole jobs: node0: ...`)
    if first.startswith("-") or first in COMMANDS:
        name, rest = (first, words[1:]) if first in COMMANDS else ("", words)
    elif "." in first or "/" in first:
        name, rest = "ui", words[1:]  # `distconsole hosts.yaml ...` opens the console
    else:
        name, rest = first, words[1:]  # a mistyped command: cli.py refuses it too
    if "--" in rest:
        rest = rest[: rest.index("--")]
    return name, " ".join(rest)


def problems(text: str, where: str) -> list[str]:
    found: list[str] = []
    known = parsers()
    for name, rest in commands_in(text):
        if name not in known:
            found.append(f"{where}: `distconsole {name}`: no such sub-command")
            continue
        for option in OPTION.findall(rest):
            option = option.split("=", 1)[0]
            if option not in known[name]:
                found.append(f"{where}: `distconsole {name}` has no option {option}")
    every = set().union(*known.values())  # with the root's own (--version)
    for option in set(OPTION.findall(text)):
        if option not in every and option not in OTHER_TOOLS:
            found.append(f"{where}: {option} is no option of distconsole (nor listed above)")
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_command_and_option_a_page_shows_exists(page: Path) -> None:
    assert problems(page.read_text(), page.name) == []


def test_the_pages_show_commands_at_all() -> None:
    shown = {name for page in PAGES for name, _ in commands_in(page.read_text())}
    assert {"launch", "plan", "logs", "gpus", "metrics", "export", "ui"} <= shown


@pytest.mark.parametrize(
    "text",
    [
        "```sh\ndistconsole launch hosts.yaml --kind ddp --made-up-option 3 -- train.py\n```",
        "Follow it with `logs --tail-forever`.",
        "```sh\ndistconsole metrics hosts.yaml \\\n    --listen 0.0.0.0:9400 --scrape-all\n```",
        "`distconsole lanch hosts.yaml`",
        "Pass `--gpus-per-node 8` to use every GPU.",
    ],
)
def test_a_made_up_command_or_option_is_caught(text: str) -> None:
    assert problems(text, "page.md")


def test_the_program_s_own_options_are_its_own() -> None:
    text = "```sh\ndistconsole launch hosts.yaml --kind ddp -- example:ddp --crash-rank 1\n```"
    assert problems(text, "page.md") == []


def test_the_readme_is_a_front_page_linking_the_docs() -> None:
    text = (ROOT / "README.md").read_text()
    assert text.count("\n") <= 300
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)\)", text))
    assert len(linked) >= 4, linked
    # Relative links of every page lead to files that exist (pages written by others
    # included: a link to a page not written yet fails here until it is).
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target:
                assert (page.parent / target).exists(), f"{page.name}: {target}"


def test_ci_runs_the_readme_s_test_command() -> None:
    section = (ROOT / "README.md").read_text().split("## Tests", 1)[1]
    block = FENCE.search(section)
    assert block is not None
    command = block[2].strip()
    assert command == (
        "bash scripts/setup-test-env.sh && /opt/distconsole-test/venv/bin/python -m pytest -q -n 2"
    )
    assert command in (ROOT / ".ci" / "run").read_text().splitlines()
