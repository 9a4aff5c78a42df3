"""The README's quick start, exactly: a fresh venv, its install command, then the demo trains.

The install command is read from the README's first ``sh`` block (so the test breaks when
the README changes without it) and run with a brand-new venv's pip in a copy of this
working tree (tracked and untracked, not ignored files: what a fresh clone would hold plus
the change under test). Pip's own configuration and cache are the machine's, as they
would be for a user. Then that venv's ``distconsole demo --serve`` and ``distconsole
launch`` run the bundled examples on the demo, nothing else on PATH.

The install waits on the package index far more than it computes (a dry run here: 14 s of
CPU in 220 s), so it starts as soon as collection ends (``start_early``, called by
tests/conftest.py) and runs beside the tests before this module; the fixture waits for it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.test_demo import REPO, _end

INSTALL_TIMEOUT_S = 600
pytestmark = pytest.mark.slow


def quick_start_lines() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Quick start", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "the README's quick start has no sh block"
    return [line for line in block[1].splitlines() if line.strip()]


def install_argv() -> list[str]:
    """The quick start's `pip install ...` (up to its `&&`)."""
    for line in quick_start_lines():
        for part in line.split("&&"):
            words = shlex.split(part, comments=True)
            if words[:2] == ["pip", "install"]:
                return words
    raise AssertionError(f"no `pip install` in the quick start: {quick_start_lines()}")


def copy_tree(destination: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for raw in listed:
        if not raw:
            continue
        source = REPO / os.fsdecode(raw)
        if not source.is_file():
            continue  # deleted in the working tree, not yet in the index
        target = destination / os.fsdecode(raw)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def clean_env(venv: Path, data: Path) -> dict[str, str]:
    """The caller's environment minus every trace of the test venv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH")
    }
    test_bin = str(Path(sys.executable).parent)
    path = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p != test_bin]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    env["DISTCONSOLE_DATA_DIR"] = str(data)
    return env


@dataclass
class Install:
    """The quick start's install, running or done, in its own root folder."""

    root: Path
    venv: Path
    env: dict[str, str]
    argv: list[str]
    process: subprocess.Popen[bytes]
    started: float


def begin_install(root: Path) -> Install:
    """A copy of the working tree, a brand-new venv, then its pip running the README's
    install command (not waited for)."""
    source = root / "distconsole"
    copy_tree(source)
    venv = root / "venv"
    base_python = Path(sys.base_prefix) / "bin" / "python3"
    subprocess.run([str(base_python), "-m", "venv", str(venv)], check=True, timeout=120)
    env = clean_env(venv, root / "data")
    argv = [str(venv / "bin" / "pip"), *install_argv()[1:]]
    # Files, not pipes: nobody reads a pipe while it runs early, and a full one stalls pip.
    with (root / "pip.out").open("w") as out, (root / "pip.err").open("w") as err:
        process = subprocess.Popen(argv, cwd=source, env=env, stdout=out, stderr=err)
    return Install(root, venv, env, argv, process, time.monotonic())


def finish_install(install: Install) -> None:
    waited_from = time.monotonic()
    try:
        code = install.process.wait(timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        install.process.kill()
        install.process.wait()
        raise AssertionError(f"{shlex.join(install.argv)} took over {INSTALL_TIMEOUT_S} s") from exc
    waited = time.monotonic() - waited_from
    err = (install.root / "pip.err").read_text(errors="replace")
    assert code == 0, f"{shlex.join(install.argv)} failed:\n{err[-3000:]}"
    begun = waited_from - install.started
    print(f"\nquick start install: {shlex.join(install_argv())} begun {begun:.0f} s before")
    print(f"the tests that needed it, which then waited {waited:.0f} s for it")


_early: list[Install] = []
_starting: list[threading.Thread] = []


def start_early(items: Sequence[pytest.Item]) -> None:
    """Called by tests/conftest.py once collection ends: begins the install when a
    selected test needs it."""
    if _early or not shutil.which("git"):
        return
    if not any("fresh_install" in getattr(item, "fixturenames", ()) for item in items):
        return
    # The tmp_path_factory fixture's own factory, so the venv stays with the run's other
    # temporary files (pytest keeps the last 3 runs'): deleting 1 GB of venv in the test
    # took minutes on a loaded machine.
    factory = getattr(items[0].config, "_tmp_path_factory", None)
    if isinstance(factory, pytest.TempPathFactory):
        root = factory.mktemp("quickstart")
    else:
        root = Path(tempfile.mkdtemp(prefix="distconsole-quickstart-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
    atexit.register(_stop)  # a run stopped before the fixture leaves no pip running

    def begin() -> None:
        # On an error the fixture installs again, inline, and fails there saying why.
        with contextlib.suppress(Exception):
            _early.append(begin_install(root))

    # A thread: copying the tree and making the venv take seconds too, and the first
    # tests need not wait for them.
    thread = threading.Thread(target=begin, name="quickstart-install", daemon=True)
    _starting.append(thread)
    thread.start()


def _stop() -> None:
    for thread in _starting:
        thread.join(timeout=150)
    for install in _early:
        if install.process.poll() is None:
            install.process.kill()
            install.process.wait()


@pytest.fixture(scope="module")
def fresh_install(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, dict[str, str]]]:
    if not shutil.which("git"):
        pytest.skip("git is needed to copy the working tree")
    for thread in _starting:
        thread.join()
    install = _early[0] if _early else begin_install(tmp_path_factory.mktemp("quickstart"))
    try:
        finish_install(install)
    finally:
        _stop()
    yield install.venv, install.env


def test_the_quick_start_ends_by_opening_the_demo() -> None:
    assert quick_start_lines()[-1].endswith("distconsole demo")


def test_after_the_quick_start_install_the_demo_trains_every_bundled_example(
    fresh_install: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    venv, env = fresh_install
    serve = subprocess.Popen(
        [str(venv / "bin" / "distconsole"), "demo", "--serve", "--hosts", "2"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stdout is not None
        inventory = serve.stdout.readline().strip()
        assert inventory, serve.stderr.read() if serve.stderr else ""

        def launch(*argv: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [str(venv / "bin" / "distconsole"), "launch", inventory, *argv],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=240,
            )

        # One rank per host: what this proves (the fresh venv's torch trains across the
        # demo's hosts) needs no more, and each rank more is another torch import.
        ddp = launch(
            "--kind", "ddp", "--gpus-per-host", "1", "--total-steps", "40", "--", "example:ddp"
        )  # fmt: skip
        assert ddp.returncode == 0, ddp.stderr[-3000:]
        assert re.search(r"job ddp-\S+ succeeded", ddp.stderr), ddp.stderr[-2000:]
        # The ranks ran the fresh venv's torch, not the test environment's.
        assert "params_checksum=" in ddp.stdout
        ps = launch("--kind", "ps", "--total-steps", "20", "--", "example:ps")
        assert ps.returncode == 0, ps.stderr[-3000:]
        horovod = launch("--kind", "horovod", "--", "example:horovod")
        # Horovod is not part of the quick start: refused up front, naming what is missing.
        assert horovod.returncode == 1, horovod.stderr[-3000:]
        assert "nothing was started" in horovod.stderr, horovod.stderr[-2000:]
        assert re.search(r"FAIL .*horovod", horovod.stderr), horovod.stderr[-2000:]
        assert "Traceback" not in horovod.stderr
    finally:
        _end(serve)
