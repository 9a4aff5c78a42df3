"""The drain's GPU detection (``supervisor/drain.py`` ``SvGpuWatch``) with the health
verdict's rules, run for real: the imported part, and the same code as SHIPPED (the
supervisor's single source, executed as on a host: no console import).

GPUs: the nvidia-smi STAND-IN (``tests/standin/nvidia-smi``; no GPU here) replaying the
real H200 capture, its faults copy (``csv_h200-faults``, see tests/data/nvidia-smi/
SOURCES.md), and copies written here: the capture with ``gpu_recovery_action`` set, and a
two-GPU host (the capture's row twice, the second with index 1, its own PCI address and
UUID). The PCI buses written here (0x5a, 0x5b) are used by no other test: the wiring test
reads the machine's real kernel log, where other tests write Xid lines. Xid lines for the
detection tests are in kmsg-format files (``/dev/kmsg``'s "prio,seq,usec,flags;text").
The stand-in that never answers is ``tests/standin/hung/nvidia-smi``.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from console.hostprogs.supervisor import drain as drain_module
from console.hostprogs.supervisor.source import supervisor_source
from console.probe.health import host_verdicts
from tests.unit.test_health_sampler import sample_lines, view_of

TESTS = Path(__file__).resolve().parent.parent
STANDIN = TESTS / "standin"
DATA = TESTS / "data" / "nvidia-smi"
UUID_1 = "GPU-11111111-0000-0000-0000-000000000000"


def shipped() -> ModuleType:
    """The supervisor's single source, run as on a host (``__name__`` is ``__main__``, so
    the parts' console imports are skipped) up to its entry point."""
    source = supervisor_source()
    body = source[: source.rindex('if __name__ == "__main__":')]
    module = ModuleType("shipped_supervisor")
    module.__dict__["__name__"] = "__main__"
    exec(compile(body, "supervisor.py", "exec"), module.__dict__)
    return module


@pytest.fixture(params=["imported", "shipped"])
def part(request: pytest.FixtureRequest) -> Any:
    return drain_module if request.param == "imported" else shipped()


def edited(tmp_path: Path, name: str, rows: int = 1, **columns: str) -> Path:
    """A copy of the H200 capture (``tmp_path/name``): ``columns`` set, and with
    ``rows`` 2 a second GPU; the PCI buses moved to 0x5a/0x5b (see the module's doc)."""
    raw = (DATA / "csv_h200_query-gpu.csv").read_text().splitlines()
    header = next(csv.reader([raw[0]], skipinitialspace=True))
    names = [h.split(" [")[0].strip() for h in header]
    row = next(csv.reader([raw[1]], skipinitialspace=True))
    for column, value in columns.items():
        row[names.index(column)] = value
    out = []
    for i in range(rows):
        copy = list(row)
        copy[names.index("index")] = str(i)
        copy[names.index("pci.bus_id")] = f"00000000:{0x5A + i:02x}:00.0"
        if i:
            copy[names.index("uuid")] = UUID_1
        out.append(copy)
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(out)
    (tmp_path / f"{name}_query-gpu.csv").write_text(
        raw[0] + "\n" + text.getvalue().replace(",", ", ")
    )
    (tmp_path / f"{name}_compute-apps.csv").write_text(
        (DATA / "csv_h200_compute-apps.csv").read_text()
    )
    return tmp_path / name


def env_for(capture: Path | str, standin: Path = STANDIN) -> dict[str, str]:
    return dict(
        os.environ, PATH=f"{standin}:{os.environ['PATH']}", NVSMI_STANDIN_CAPTURE=str(capture)
    )


def kmsg_file(tmp_path: Path, *lines: tuple[float, str]) -> str:
    """A file in /dev/kmsg's format; each line (seconds ago, message)."""
    now_us = time.monotonic() * 1e6
    records = [f"3,{i},{int(now_us - ago * 1e6)},-;{text}\n" for i, (ago, text) in enumerate(lines)]
    path = tmp_path / "kmsg"
    path.write_text("6,0,1,-;Linux version 6.8\n" + "".join(records))
    return str(path)


def watch(part: Any, env: dict[str, str], tmp_path: Path, kmsg: str = "", **kw: Any) -> Any:
    started = time.time() - 60  # the job started a minute ago
    if not kmsg:
        kmsg = kmsg_file(tmp_path)
    w = part.SvGpuWatch(env, started, kmsg=kmsg, **kw)
    assert w.reader.first.wait(20), "the stand-in nvidia-smi gave no first reading"
    return w


def test_healthy_h200_capture_is_no_drain(part: Any, tmp_path: Path) -> None:
    w = watch(part, env_for(DATA / "csv_h200"), tmp_path)
    try:
        assert w.check(None) == ([], {})
        assert w.check(["0"]) == ([], {})
    finally:
        w.stop()


def test_faulty_capture_drains_with_the_health_verdicts_own_reasons(
    part: Any, tmp_path: Path
) -> None:
    w = watch(part, env_for(DATA / "csv_h200-faults"), tmp_path)
    try:
        drain, others = w.check(None)
    finally:
        w.stop()
    assert drain == [
        "GPU 0: 2 uncorrectable ECC error(s) since the last reset",
        "GPU 0: row remap pending (reset the GPU)",
    ]
    assert others == {}
    # The console's verdict of the same capture names the same findings.
    (verdict,) = [
        v
        for v in host_verdicts(view_of(sample_lines(STANDIN, capture="csv_h200-faults")))
        if v.gpu == 0
    ]
    assert verdict.state == "fail"
    assert all(why.removeprefix("GPU 0: ") in verdict.reasons for why in drain)


def test_a_recovery_action_drains(part: Any, tmp_path: Path) -> None:
    capture = edited(tmp_path, "recovery", gpu_recovery_action="Drain and Reset")
    w = watch(part, env_for(capture), tmp_path)
    try:
        assert w.check(["0"]) == (["GPU 0: recovery action: Drain and Reset"], {})
    finally:
        w.stop()


def test_xid_79_on_the_jobs_gpu_drains_and_on_another_gpu_does_not(
    part: Any, tmp_path: Path
) -> None:
    capture = edited(tmp_path, "two", rows=2)
    kmsg = kmsg_file(
        tmp_path,
        (120, "NVRM: Xid (PCI:0000:5a:00): 79, pid=7, GPU has fallen off the bus."),
        (5, "NVRM: Xid (PCI:0000:5b:00): 79, pid=1234, GPU has fallen off the bus."),
        (4, "NVRM: Xid (PCI:0000:5b:00): 13, pid=1234, Graphics Exception"),
    )
    w = watch(part, env_for(capture), tmp_path, kmsg=kmsg)
    try:
        # GPU 1 (PCI 5b) is the job's: by index, by UUID, and with no CUDA_VISIBLE_DEVICES.
        for visible in (["1"], [UUID_1], ["GPU-1111"], None):
            drain, others = w.check(visible)
            assert len(drain) == 1 and others == {}, (visible, drain, others)
            assert drain[0].startswith("GPU 1: Xid 79 (GPU has fallen off the bus) at "), drain
        # Only GPU 0 is the job's: GPU 1's Xid is said, not a drain. GPU 0's Xid 79 was
        # before the job started (two minutes ago): not the job's.
        drain, others = w.check(["0"])
        assert drain == [] and list(others) == [1], (drain, others)
        assert others[1][0].startswith("Xid 79 (GPU has fallen off the bus) at ")
    finally:
        w.stop()


def test_nvidia_smi_that_never_answers_drains_after_the_bound_and_check_never_waits(
    part: Any, tmp_path: Path
) -> None:
    bound = 1.5
    w = part.SvGpuWatch(
        env_for(DATA / "csv_h200", STANDIN / "hung"), time.time(), 0.5, bound, kmsg_file(tmp_path)
    )
    started = time.monotonic()
    try:
        while True:
            t0 = time.monotonic()
            drain, _others = w.check(None)
            assert time.monotonic() - t0 < 0.5, "the check waited on nvidia-smi"
            if drain:
                break
            assert time.monotonic() - started < 15, "no 'not answering' within 15 s"
            time.sleep(0.1)
    finally:
        w.stop()
    took = time.monotonic() - started
    assert bound <= took < bound + 5, took
    assert drain == [f"host: nvidia-smi not answering (no reply within {bound:g} s)"]


class StubSupervisor(drain_module.SvDrain):
    """The supervisor's state the drain reads (a follower of an elastic ddp job)."""

    def __init__(self, job_id: str) -> None:
        self.host, self.job_id, self.is_leader = "node2", job_id, False
        self.cfg = {"kind": "ddp", "min_hosts": 2, "processes": [{"host": "node2", "ranks": [2]}]}
        self.local = SimpleNamespace(term_at=None, kill=lambda: self.events.append(("KILL", {})))
        self.remote_verdict = None
        self.stop_asked_at = None
        self.started_at = time.time()
        self.dirty = False
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.sent: list[dict[str, Any]] = []

    def event(self, event: str, **details: Any) -> None:
        self.events.append((event, details))

    def send_leader(self, message: dict[str, Any]) -> None:
        self.sent.append(message)


def test_supervisor_drains_on_its_jobs_gpu_and_says_once_of_another(tmp_path: Path) -> None:
    """The wiring: CUDA_VISIBLE_DEVICES and PATH read from a job process's environment;
    GPU 1 (not the job's) has a recovery action: told once; then GPU 0 gets one: drained."""
    job_id = f"drain-test-{os.getpid()}"
    capture = edited(tmp_path, "two", rows=2, gpu_recovery_action="GPU Reset")
    rows = (tmp_path / "two_query-gpu.csv").read_text().splitlines()
    first = [rows[0], rows[1].replace("GPU Reset", "None"), rows[2]]
    (tmp_path / "two_query-gpu.csv").write_text("\n".join(first) + "\n")
    env = env_for(capture)
    env.update(DISTCONSOLE_JOB_ID=job_id, CUDA_VISIBLE_DEVICES="0")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    sv = StubSupervisor(job_id)
    try:
        sv.init_drain()
        assert sv.drain_on
        deadline = time.monotonic() + 20
        while not sv.events:
            assert time.monotonic() < deadline, "no event"
            sv.last_drain_check = 0.0
            sv.check_drain()
            time.sleep(0.2)
        for _ in range(3):
            sv.last_drain_check = 0.0
            sv.check_drain()
        assert sv.events == [
            ("gpu-unhealthy-not-used", {"gpu": 1, "why": "recovery action: GPU Reset"})
        ]
        assert sv.drained is None and not sv.sent
        (tmp_path / "next.csv").write_text("\n".join(rows) + "\n")
        os.replace(tmp_path / "next.csv", tmp_path / "two_query-gpu.csv")
        while sv.drained is None:
            assert time.monotonic() < deadline + 20, sv.events
            sv.last_drain_check = 0.0
            sv.check_drain()
            time.sleep(0.2)
        why = "GPU 0: recovery action: GPU Reset"
        assert sv.events[1:] == [("drained", {"why": why}), ("KILL", {})]
        assert sv.sent == [{"type": "drained", "why": why}]
    finally:
        proc.kill()
        proc.wait()
        if sv.gpu_watch is not None:
            sv.gpu_watch.stop()
