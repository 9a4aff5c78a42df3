"""`distconsole demo` itself (not --serve): the real console in a real terminal (tmux).

It opens on the GPU screen with the demo's job training on the first hosts, the title
bar naming the demo's inventory; `--idle` opens it with nothing running; `q` quits and
powers the hosts off (nothing the demo started is left, its job recorded as stopped).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from console.inventory import load
from console.jobs.history import DB_NAME, JobHistory
from console.jobs.models import JobState
from tests.integration.test_demo import REPO

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]
WIDTH, HEIGHT = 200, 50


class Terminal:
    def __init__(self, tmp_path: Path, *argv: str) -> None:
        self.socket = tmp_path / "tmux.sock"
        self.exited = tmp_path / "exited"
        env = {
            "DISTCONSOLE_DATA_DIR": str(tmp_path / "data"),
            "TERM": "xterm-256color",
            "COLUMNS": str(WIDTH),
            "LINES": str(HEIGHT),
        }
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        command = (
            f"cd {shlex.quote(str(REPO))} && env {exports} "
            f"{shlex.join([sys.executable, '-m', 'console', *argv])}; "
            f"echo $? > {shlex.quote(str(self.exited))}; sleep 600"
        )
        self.tmux("new-session", "-d", "-x", str(WIDTH), "-y", str(HEIGHT), "bash", "-c", command)

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-S", str(self.socket), *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p")

    def wait_for(self, what: str, ok: Callable[[str], bool], timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if ok(text):
                return text
            if time.monotonic() > deadline:
                pytest.fail(f"the console never showed {what}:\n{text}")
            time.sleep(0.5)

    def quit(self) -> int:
        self.tmux("send-keys", "q")
        deadline = time.monotonic() + 60
        while not self.exited.exists():
            if time.monotonic() > deadline:
                pytest.fail(f"the demo did not exit after q:\n{self.screen()}")
            time.sleep(0.2)
        return int(self.exited.read_text())

    def close(self) -> None:
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], capture_output=True)


def demo_processes(root: Path) -> list[psutil.Process]:
    """Processes started by this demo's hosts (their HOME is under its folder)."""
    found = []
    for proc in psutil.process_iter():
        try:
            home = proc.environ().get("HOME", "")
        except (psutil.Error, OSError):
            continue
        if home.startswith(str(root) + os.sep):
            found.append(proc)
    return found


def test_the_demo_opens_on_the_gpu_screen_training_and_names_its_inventory(
    tmp_path: Path,
) -> None:
    root = tmp_path / "demo"
    term = Terminal(tmp_path, "demo", "--hosts", "3", "--dir", str(root))
    try:
        text = term.wait_for(
            "the demo's job on every host's simulated GPUs",
            lambda t: t.count("job demo-") >= 3 and "Simulated" in t,
        )
        assert str(root / "hosts.yaml") in text.splitlines()[0]  # the title bar
        assert "Filter" in text and "Attention" in text  # the GPU screen's own keys
        assert term.quit() == 0
    finally:
        term.close()
    deadline = time.monotonic() + 10
    while demo_processes(root) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert demo_processes(root) == []
    # Its job ended with the hosts, and the history says so: a later demo on the same
    # --dir does not re-attach to it.
    history = JobHistory(tmp_path / "data" / DB_NAME)
    records = history.records(inventory=str(root / "hosts.yaml"))
    assert [(r.name, r.state) for r in records] == [("demo-ddp", JobState.STOPPED)]


def test_idle_opens_with_nothing_running(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    term = Terminal(tmp_path, "demo", "--hosts", "2", "--idle", "--dir", str(root))
    try:
        term.wait_for("both hosts' GPUs", lambda t: t.count("Simulated") >= 8)
        time.sleep(2)  # a job would have been launched before the console opened
        text = term.screen()
        assert "job demo-" not in text
        assert [p for p in demo_processes(root) if "train" in " ".join(p.cmdline())] == []
        assert term.quit() == 0
    finally:
        term.close()


def _wait_no_demo_processes(root: Path, timeout: float = 20) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        left = []
        for proc in demo_processes(root):
            with contextlib.suppress(psutil.Error):
                left.append(" ".join(proc.cmdline())[:120])
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.3)


def _demo_pid(root: Path) -> int:
    """The demo process itself: the console running `demo ... --dir ROOT`."""
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "demo" in cmdline and str(root) in cmdline and "console" in cmdline:
            return proc.pid
    raise AssertionError(f"no demo process for {root}")


def test_closing_the_terminal_powers_the_demo_hosts_off(tmp_path: Path) -> None:
    """SIGHUP (the terminal window closed) ends the demo's job as `q` does: torchrun, its
    ranks and the supervisors, all detached with setsid, are gone, and the history says
    the job stopped."""
    root = tmp_path / "demo"
    term = Terminal(tmp_path, "demo", "--hosts", "2", "--dir", str(root))
    try:
        term.wait_for("the demo's job", lambda t: t.count("job demo-") >= 2)
        assert any("torchrun" in " ".join(p.cmdline()) for p in demo_processes(root))
        os.kill(_demo_pid(root), signal.SIGHUP)
        assert _wait_no_demo_processes(root) == []
        deadline = time.monotonic() + 30
        while not term.exited.exists():  # the console's own cleanup, to its end
            assert time.monotonic() < deadline, "the demo did not exit after SIGHUP"
            time.sleep(0.2)
    finally:
        term.close()
    history = JobHistory(tmp_path / "data" / DB_NAME)
    records = history.records(inventory=str(root / "hosts.yaml"))
    assert [(r.name, r.state) for r in records] == [("demo-ddp", JobState.STOPPED)]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_demo_leaves_no_process_behind(tmp_path: Path, sig: signal.Signals) -> None:
    """SIGTERM ends the console as `q` does; even SIGKILL, which no handler sees, leaves
    nothing: the demo's reaper (its own session) reads EOF on its pipe and powers off."""
    root = tmp_path / "demo"
    term = Terminal(tmp_path, "demo", "--hosts", "2", "--idle", "--dir", str(root))
    try:
        term.wait_for("both hosts' GPUs", lambda t: t.count("Simulated") >= 8)
        host = load(root / "hosts.yaml").hosts[0]
        # A detached process on a demo host, as a job's are (own session, no parent).
        subprocess.run(
            [
                "ssh", "-i", str(host.identity_file), "-p", str(host.port),
                "-o", f"UserKnownHostsFile={host.known_hosts}", "-o", "StrictHostKeyChecking=yes",
                "-o", "BatchMode=yes", f"{host.user}@{host.address}",
                "setsid sleep 600 </dev/null >/dev/null 2>&1 &",
            ],
            check=True,
            timeout=30,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while not any("sleep 600" in " ".join(p.cmdline()) for p in demo_processes(root)):
            assert time.monotonic() < deadline, "the detached process never started"
            time.sleep(0.2)
        os.kill(_demo_pid(root), sig)
        assert _wait_no_demo_processes(root) == []
    finally:
        term.close()
