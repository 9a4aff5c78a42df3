"""hang_capture on real local processes: a torchrun-like agent whose worker waits in a
collective-like receive (in C, in a session of its own), a SIGSTOPped rank and a zombie.

The processes load the job's real sitecustomize hook from the job directory's python/
folder (as the plan puts it on PYTHONPATH) and carry the job's marker variables, as the
wrapper gives them. py-spy is the real one from the test venv; nvidia-smi is the
stand-in (tests/standin, a real captured H200 output), with our worker's pid listed as
a GPU process.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from console.hostprogs.supervisor import hang_capture as hc
from console.hostprogs.supervisor import hang_inspect as hi
from console.jobs.ssh.remote_ops import bundled_file

# The capture finds a job's processes by its marker across the whole machine: an id of
# this run's own, so another run of these tests at the same time is not taken for ours.
JOB_ID = f"ddp-hang-20260101-000000-{os.getpid() % 16**6:06x}"
VENV_BIN = str(Path(sys.executable).parent)
STANDIN = str(Path(__file__).resolve().parents[1] / "standin")

AGENT = """
import os, subprocess, sys, time
for i in range(30):
    print("[default0]:epoch 1 step %d loss 0.%d" % (i, i), flush=True)
print("agent: a warning on stderr", file=sys.stderr, flush=True)
# Like torchrun: the worker leads a session of its own, so only the marker finds it.
worker = subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2]], start_new_session=True)
def wait_for_workers():
    worker.wait()
wait_for_workers()
"""

WORKER = """
import socket, sys, threading
a, b = socket.socketpair()
def heartbeat():
    threading.Event().wait()
threading.Thread(target=heartbeat, name="heartbeat", daemon=True).start()
def all_reduce():  # a rank inside a collective: blocked in C on a socket
    a.recv(1)
open(sys.argv[1], "w").close()
all_reduce()
"""

STOPPED = """
import sys, time
print("step 7", flush=True)
def train_step():
    open(sys.argv[1], "w").close()
    while True:
        time.sleep(0.05)
train_step()
"""

ZOMBIE = """
import subprocess, sys, time
child = subprocess.Popen(["true"])  # never waited for: it stays a zombie
open(sys.argv[1], "w").close()
time.sleep(3600)
"""


@dataclass
class Job:
    dir: Path
    agent: subprocess.Popen[bytes]
    stopped: subprocess.Popen[bytes]
    zombie: subprocess.Popen[bytes]
    worker_pid: int

    def procs(self) -> list[dict[str, object]]:
        return [
            {"name": "torchrun-0", "rank": 0, "pgid": self.agent.pid},
            {"name": "worker-1", "rank": 1, "pgid": self.stopped.pid},
            {"name": "worker-2", "rank": 2, "pgid": self.zombie.pid},
        ]


def wait_until(check: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def state_of(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2]


def start(job_dir: Path, name: str, source: str, *args: str) -> subprocess.Popen[bytes]:
    script = job_dir / f"{name}.py"
    script.write_text(source)
    env = {
        **os.environ,
        "DISTCONSOLE_JOB_ID": JOB_ID,
        "DISTCONSOLE_JOB_DIR": str(job_dir),
        "DISTCONSOLE_PROCESS": name,
        "PYTHONPATH": str(job_dir / "python"),
        "PYTHONUNBUFFERED": "1",
    }
    with open(job_dir / f"{name}.out", "wb") as out, open(job_dir / f"{name}.err", "wb") as err:
        child = subprocess.Popen(
            [sys.executable, str(script), *args],
            env=env,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    (job_dir / f"{name}.pgid").write_text(f"{child.pid}\n")
    return child


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    job_dir = tmp_path_factory.mktemp("jobs") / JOB_ID
    (job_dir / "python").mkdir(parents=True)
    (job_dir / "python" / "sitecustomize.py").write_bytes(
        bundled_file("hang_sitecustomize.py", "console.hostprogs.supervisor")
    )
    (job_dir / "worker.py").write_text(WORKER)
    ready = [job_dir / f"ready-{n}" for n in ("worker", "stopped", "zombie")]
    agent = start(job_dir, "torchrun-0", AGENT, str(job_dir / "worker.py"), str(ready[0]))
    stopped = start(job_dir, "worker-1", STOPPED, str(ready[1]))
    zombie = start(job_dir, "worker-2", ZOMBIE, str(ready[2]))
    groups = [agent.pid, stopped.pid, zombie.pid]
    try:
        wait_until(lambda: all(r.exists() for r in ready), "the test processes")
        os.kill(stopped.pid, signal.SIGSTOP)
        wait_until(lambda: state_of(stopped.pid) == "T", "the SIGSTOP")
        zombies = lambda: [  # noqa: E731
            p
            for p in hi.hang_job_processes(JOB_ID)
            if p["pgid"] == zombie.pid and p["state"] == "Z"
        ]
        wait_until(zombies, "the zombie")
        workers = [
            p["pid"]
            for p in hi.hang_job_processes(JOB_ID)
            if p["process"] == "torchrun-0" and p["pgid"] != agent.pid
        ]
        groups += workers  # its own group (as torchrun's are): ended below whatever happens
        assert len(workers) == 1, workers
        yield Job(job_dir, agent, stopped, zombie, workers[0])
    finally:
        for pgid in groups:
            for sig in (signal.SIGKILL, signal.SIGCONT):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, sig)
        for child in (agent, stopped, zombie):
            child.wait()


@pytest.fixture(scope="module")
def captured(job: Job) -> dict[str, Any]:
    """One capture with py-spy and the GPU stand-in on PATH (what a GPU host has)."""
    pids = job.dir / "gpu-pids"
    pids.write_text(f"{job.worker_pid}\n")
    saved = {k: os.environ.get(k) for k in ("PATH", "NVSMI_STANDIN_PIDS_FILE")}
    os.environ["PATH"] = f"{STANDIN}:{VENV_BIN}:{os.environ['PATH']}"
    os.environ["NVSMI_STANDIN_PIDS_FILE"] = str(pids)
    try:
        result = hc.hang_capture(str(job.dir), job.procs())
        # Kept aside: a later test captures again into hang/.
        shutil.copytree(job.dir / "hang", job.dir / "first-capture")
        return result
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def record(job_dir: Path, name: str, folder: str = "first-capture") -> dict[str, Any]:
    data = json.loads((job_dir / folder / f"{name}.json").read_text())
    assert isinstance(data, dict)
    return data


def by_pid(rec: dict[str, Any], pid: int) -> dict[str, Any]:
    processes = rec["processes"]
    assert isinstance(processes, list)
    return next(p for p in processes if p["pid"] == pid)


def test_every_named_process_is_captured_and_written(job: Job, captured: dict[str, Any]) -> None:
    assert captured["captured"] == ["torchrun-0", "worker-1", "worker-2"]
    for name in captured["captured"]:
        assert (job.dir / "hang" / f"{name}.json").is_file()
        assert (job.dir / "hang" / f"{name}.stack.txt").is_file()
    # The signal did not kill anyone: no chain to SIGUSR2's default action.
    assert job.agent.poll() is None and state_of(job.worker_pid) == "S"


def test_states_and_wchan(job: Job, captured: dict[str, Any]) -> None:
    agent = record(job.dir, "torchrun-0")
    pids = [p["pid"] for p in agent["processes"]]
    assert pids == sorted([job.agent.pid, job.worker_pid])  # the worker found by its marker
    worker = by_pid(agent, job.worker_pid)
    assert worker["state_name"] == "sleeping"
    threads = worker["threads"]
    assert isinstance(threads, list) and len(threads) == 2
    stopped = by_pid(record(job.dir, "worker-1"), job.stopped.pid)
    assert (stopped["state"], stopped["state_name"]) == ("T", "stopped")
    zombie_rec = record(job.dir, "worker-2")
    names = {p["state_name"] for p in zombie_rec["processes"]}
    assert names == {"sleeping", "zombie"}
    if Path("/proc/self/wchan").exists() and hi._hang_wchan(f"/proc/{os.getppid()}/wchan"):
        # A kernel that reports where a process sleeps: the blocked worker has one.
        assert worker["wchan"], worker
        assert all(t["wchan"] for t in threads), threads


def test_stacks_by_the_faulthandler_signal(job: Job, captured: dict[str, Any]) -> None:
    worker = by_pid(record(job.dir, "torchrun-0"), job.worker_pid)
    text = worker["faulthandler"]
    assert isinstance(text, str)
    assert "in all_reduce" in text  # the main thread, stuck in C inside recv
    assert "in heartbeat" in text  # and every other thread
    assert worker["faulthandler_problem"] is None
    stack_txt = (job.dir / "first-capture" / "torchrun-0.stack.txt").read_text()
    assert "in all_reduce" in stack_txt and f"pid {job.worker_pid}" in stack_txt


def test_stopped_process_says_why_it_has_no_faulthandler_stack(
    job: Job, captured: dict[str, Any]
) -> None:
    stopped = by_pid(record(job.dir, "worker-1"), job.stopped.pid)
    assert stopped["faulthandler"] is None
    assert "stopped" in str(stopped["faulthandler_problem"])
    # py-spy reads a stopped process's memory without its help.
    assert "train_step" in str(stopped["py_spy"]), stopped["py_spy_problem"]
    zombie = next(p for p in record(job.dir, "worker-2")["processes"] if p["state"] == "Z")
    assert "zombie" in str(zombie["faulthandler_problem"])


def test_stacks_by_py_spy(job: Job, captured: dict[str, Any]) -> None:
    worker = by_pid(record(job.dir, "torchrun-0"), job.worker_pid)
    assert "all_reduce" in str(worker["py_spy"]), worker["py_spy_problem"]
    agent = by_pid(record(job.dir, "torchrun-0"), job.agent.pid)
    assert "wait_for_workers" in str(agent["py_spy"]), agent["py_spy_problem"]


def test_without_py_spy_the_capture_says_so(
    job: Job, captured: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert shutil.which("py-spy") is None
    result = hc.hang_capture(str(job.dir), job.procs()[:1])
    assert result["captured"] == ["torchrun-0"]
    worker = by_pid(record(job.dir, "torchrun-0", "hang"), job.worker_pid)
    assert worker["py_spy"] is None and worker["py_spy_problem"] == "py-spy is not on PATH"
    assert "in all_reduce" in str(worker["faulthandler"])  # the signal still answers
    assert result["gpus"] is None  # no nvidia-smi there either


def test_last_lines_and_last_step(job: Job, captured: dict[str, Any]) -> None:
    agent = record(job.dir, "torchrun-0")
    tails = agent["last_lines"]
    assert isinstance(tails, dict)
    out = tails["torchrun-0.out"]
    assert len(out) == 20 and out[-1] == "[default0]:epoch 1 step 29 loss 0.29"
    assert tails["torchrun-0.err"] == ["agent: a warning on stderr"]
    assert agent["last_step"] == {
        "step": 29,
        "epoch": 1,
        "total": None,
        "line": "[default0]:epoch 1 step 29 loss 0.29",
    }
    assert record(job.dir, "worker-1")["last_step"]["step"] == 7
    assert captured["processes"]["worker-1"]["last_step"] == 7


def test_gpus_of_the_job_from_nvidia_smi(job: Job, captured: dict[str, Any]) -> None:
    gpus = captured["gpus"]
    assert isinstance(gpus, list) and len(gpus) == 1  # only the GPU our worker is on
    (gpu,) = gpus
    assert gpu["job"] is True and gpu["job_pids"] == [job.worker_pid]
    assert isinstance(gpu["util_pct"], float) and gpu["uuid"].startswith("GPU-")
    assert record(job.dir, "torchrun-0")["gpus"] == gpus


def test_last_progress_is_the_newest_log_write(tmp_path: Path) -> None:
    (tmp_path / "a-0.pgid").write_text("1\n")
    os.utime(tmp_path / "a-0.pgid", (1000, 1000))
    assert hc.hang_last_progress(str(tmp_path), ["a-0"]) == 1000.0  # started, silent
    for name, when in (("a-0.out", 2000), ("a-0.err", 3000), ("b-0.out", 9000)):
        (tmp_path / name).write_text("x\n")
        os.utime(tmp_path / name, (when, when))
    assert hc.hang_last_progress(str(tmp_path), ["a-0"]) == 3000.0
    assert hc.hang_last_progress(str(tmp_path), ["a-0", "b-0"]) == 9000.0
    (tmp_path / "ranks" / "rank.1").mkdir(parents=True)
    (tmp_path / "ranks" / "rank.1" / "stdout").write_text("step 3\n")
    os.utime(tmp_path / "ranks" / "rank.1" / "stdout", (12000, 12000))
    assert hc.hang_last_progress(str(tmp_path), ["a-0"]) == 12000.0  # an MPI rank's file
    assert hc.hang_last_progress(str(tmp_path / "nothing"), ["a-0"]) == 0.0


def test_gpu_sample_appends_a_line_only_with_a_gpu_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_dir = tmp_path / JOB_ID
    job_dir.mkdir()
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    hc.hang_gpu_sample(str(job_dir))
    assert not (job_dir / "gpu-samples.jsonl").exists()
    monkeypatch.setenv("PATH", f"{STANDIN}:/usr/bin:/bin")
    hc.hang_gpu_sample(str(job_dir))
    hc.hang_gpu_sample(str(job_dir))
    lines = (job_dir / "gpu-samples.jsonl").read_text().splitlines()
    assert len(lines) == 2
    sample = json.loads(lines[0])
    assert len(sample["gpus"]) == 1 and not any(g["job"] for g in sample["gpus"])


OWN_HANDLER = """
import signal, sys, time
signal.signal(signal.SIGUSR2, lambda *_: None)  # the program's own: faulthandler's is gone
open(sys.argv[1], "w").close()
while True:
    time.sleep(0.05)
"""


def test_a_process_that_took_the_signal_over_is_reported_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_dir = tmp_path / JOB_ID
    (job_dir / "python").mkdir(parents=True)
    (job_dir / "python" / "sitecustomize.py").write_bytes(
        bundled_file("hang_sitecustomize.py", "console.hostprogs.supervisor")
    )
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    ready = job_dir / "ready"
    child = start(job_dir, "worker-0", OWN_HANDLER, str(ready))
    try:
        wait_until(ready.exists, "the process")
        result = hc.hang_capture(str(job_dir), [{"name": "worker-0", "rank": 0, "pgid": child.pid}])
        assert result["captured"] == ["worker-0"]
        state = by_pid(record(job_dir, "worker-0", "hang"), child.pid)
        assert state["faulthandler"] is None
        assert "no answer within" in state["faulthandler_problem"]
        assert child.poll() is None  # its own handler ran; nothing killed it
    finally:
        child.kill()
        child.wait()
