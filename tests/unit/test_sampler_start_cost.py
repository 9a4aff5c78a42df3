"""What one start of the sampler costs a host (issue 30 item 8: `gpus --json` on 64 sshd
hosts was slower than pdsh running nvidia-smi; every host starts a sampler per `gpus`).

The sampler runs for real, from the very command line the console sends (``shipment``)
through a real shell, with the nvidia-smi STAND-IN (no GPU here; tests/standin replays
a captured H200) first on its PATH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Literal

from console.inventory import Host
from console.probe import sampler
from console.transport.ship import shipment

STANDIN = Path(__file__).resolve().parent.parent / "standin"
REPO = Path(__file__).resolve().parent.parent.parent


def start(
    interval: float, path: str, source: Literal["auto", "simulated"] = "auto"
) -> subprocess.Popen[bytes]:
    """The sampler as a host starts it: ``sh -c COMMAND``, its program on stdin."""
    host = Host(name="node0", address="127.0.0.1", python=sys.executable, gpu_source=source)
    sent = shipment(host, sampler.sampler_host_program(host, interval, health=False), exec_=True)
    env = dict(os.environ, PATH=f"{path}:{os.environ['PATH']}")
    proc = subprocess.Popen(
        ["/bin/sh", "-c", sent.command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None
    proc.stdin.write(sent.stdin.encode())
    proc.stdin.close()
    return proc


def finish(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    """A one-shot's sample line (it exits after it)."""
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err
    line: dict[str, Any] = json.loads(out.decode().splitlines()[-1])
    return line


def test_the_shipped_sampler_reads_its_program_in_a_few_reads() -> None:
    """``python3 -`` read its 72 KB program from the pipe a byte per read(2): 73,000
    system calls, ~55 ms of CPU on every host at every start."""
    proc = start(1.0, str(STANDIN), source="simulated")
    try:
        assert proc.stdout is not None
        hello = json.loads(proc.stdout.readline())
        assert hello["program"] == "sampler", hello  # runs as `python3 -` ran it
        assert json.loads(proc.stdout.readline())["gpus"]  # and samples
        # sh exec'd the interpreter: the same pid. syscr: its read system calls so far.
        io = Path(f"/proc/{proc.pid}/io").read_text()
        reads = int(next(ln.split()[1] for ln in io.splitlines() if ln.startswith("syscr")))
        assert reads < len(sampler.program_source()) // 10, (reads, io)
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_a_one_shot_asks_nvidia_smi_once_per_query_without_its_loop(tmp_path: Path) -> None:
    """A one-shot line (`gpus`) started ``nvidia-smi -lms 100`` (a loop writing rows no
    one read, a reader thread) and waited for its first row in 10 ms polls."""
    log = tmp_path / "calls"
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "nvidia-smi").write_text(
        f'#!/bin/sh\necho "$*" >> {log}\nexec {STANDIN / "nvidia-smi"} "$@"\n'
    )
    (shim / "nvidia-smi").chmod(0o755)
    line = finish(start(0, str(shim)))
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and not any("-lms" in c for c in calls), calls
    assert {c.split()[0].split("=")[0] for c in calls} == {
        "--query-gpu",
        "--query-compute-apps",
    }
    nvsmi = line["nvsmi"]
    assert nvsmi["rows"] and nvsmi["rows"][0].startswith("0, GPU-"), nvsmi
    assert nvsmi["apps_rows"] and line["gpu_error"] is None, line
    assert set(line["procs"]) == {r.split(",")[1].strip() for r in nvsmi["apps_rows"]}


# Run in a process of its own: PR_SET_CHILD_SUBREAPER and the process group are its.
SUBREAPER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    sys.path.insert(0, {repo!r})
    from console.hostprogs.sampler import procs

    procs.own_children()
    assert procs._REAPER == [True], "prctl(PR_SET_CHILD_SUBREAPER) failed"
    scans = []
    listdir = os.listdir
    os.listdir = lambda path: scans.append(path) or listdir(path)

    subprocess.run(["true"], check=True)
    procs.end_children()
    assert scans == [], scans  # no child left: nothing read of /proc

    # An orphan: sh exits, its sleep comes back to this process, which ends it.
    orphaned = "sleep 300 >/dev/null 2>&1 & echo $!"
    out = subprocess.run(["sh", "-c", orphaned], capture_output=True, text=True)
    orphan = int(out.stdout)
    assert os.waitid(os.P_PID, orphan, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    procs.end_children()
    assert scans == ["/proc"], scans
    deadline = time.time() + 30
    while time.time() < deadline:
        gone = os.waitid(os.P_PID, orphan, os.WEXITED | os.WNOHANG)
        if gone is not None:
            assert gone.si_status == 9, gone  # SIGKILLed
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the orphaned sleep still runs")
    print("ok")
    """
)


def test_a_sampler_with_no_child_left_ends_without_reading_every_process() -> None:
    """end_children read /proc/*/stat of every process on the host at every exit (~700
    on one machine serving 64 sshd hosts, ~1 CPU-s per `gpus`); as a subreaper with no
    child left there is nothing of its own to end."""
    done = subprocess.run(
        [sys.executable, "-c", SUBREAPER.format(repo=str(REPO))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
