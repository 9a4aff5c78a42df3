"""The sampler's nvidia-smi readers (issue 29 item 6): a hung nvidia-smi ends with the
sampler (no orphan after the console exits), and a flood of nvidia-smi output leaves
the sampler's memory bounded.

The sampler runs for real as a host runs it (``python3 -u -``, its source on stdin).
GPUs: STAND-INs (no GPU here) first on its PATH: ``tests/standin/hung/nvidia-smi``
never answers (``exec sleep 300``), ``tests/standin/flood/nvidia-smi`` writes without end.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from console.probe import sampler

pytestmark = pytest.mark.timeout(120)

STANDIN = Path(__file__).resolve().parent.parent / "standin"


def _limit_memory() -> None:
    # Before the bounds, a flood took the sampler past 0.5 GB: keep a failing run civil.
    limit = 2 << 30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def start_sampler(standin: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PATH=f"{STANDIN / standin}:{os.environ['PATH']}")
    proc = subprocess.Popen(
        [sys.executable, "-u", "-", "0.5", "auto", "0", "h"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        preexec_fn=_limit_memory,
    )
    assert proc.stdin is not None
    proc.stdin.write(sampler.program_source().encode())
    proc.stdin.close()
    return proc


def hung_children(proc: subprocess.Popen[bytes], count: int) -> list[psutil.Process]:
    """The sampler's children once ``count`` stand-ins hang (each is ``sleep 300``)."""
    deadline = time.monotonic() + 30
    while True:
        children = psutil.Process(proc.pid).children(recursive=True)
        sleeping = [c for c in children if _name(c) == "sleep"]
        if len(sleeping) >= count:
            return children
        assert time.monotonic() < deadline, f"no {count} hung nvidia-smi: {children}"
        time.sleep(0.1)


def _name(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.Error:
        return ""


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                out.append(process)
        except psutil.Error:
            continue
    return out


def assert_all_end(children: list[psutil.Process]) -> None:
    deadline = time.monotonic() + 20
    while alive(children) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = alive(children)
    for process in left:  # the test's own clean-up; the assert below says what was left
        process.kill()
    assert not left, f"left running after the sampler ended: {left}"


def test_a_hung_nvidia_smi_ends_with_the_sampler_when_the_console_goes() -> None:
    proc = start_sampler("hung")
    assert proc.stdout is not None
    try:
        proc.stdout.readline()  # the hello
        # The stream (-lms) and the GPU-processes query both hang.
        children = hung_children(proc, 2)
        proc.stdout.close()  # the console goes away: the sampler's next line fails
        proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert_all_end(children)


def test_a_killed_sampler_takes_its_readers_with_it() -> None:
    # Nothing of the sampler runs after a SIGKILL: the kernel ends its children
    # (PR_SET_PDEATHSIG), the stream's, the GPU-processes query's and the health query's.
    proc = start_sampler("hung")
    assert proc.stdout is not None
    try:
        proc.stdout.readline()
        children = hung_children(proc, 3)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert_all_end(children)


def test_a_flood_of_nvidia_smi_output_leaves_the_sampler_small() -> None:
    proc = start_sampler("flood")
    assert proc.stdout is not None
    lines: list[int] = []
    peak_kib = 0
    try:
        os.set_blocking(proc.stdout.fileno(), False)
        started = time.monotonic()
        buffered = b""
        while time.monotonic() - started < 8:
            chunk = proc.stdout.read(1 << 20) or b""
            buffered += chunk
            *whole, buffered = buffered.split(b"\n")
            lines += [len(line) for line in whole]
            status = Path(f"/proc/{proc.pid}/status").read_text()
            peak_kib = int(status.split("VmHWM:")[1].split()[0])  # the kernel's peak RSS
            assert proc.poll() is None, "the sampler ended"
            time.sleep(0.05)
        children = psutil.Process(proc.pid).children(recursive=True)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    for child in alive(children):
        child.kill()
    print(f"flood: {len(lines)} lines, longest {max(lines)} bytes, peak RSS {peak_kib >> 10} MiB")
    assert len(lines) >= 5, "the sampler kept writing lines"
    assert max(lines) < 512 * 1024
    assert peak_kib < 150 * 1024
