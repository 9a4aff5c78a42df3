"""The sampler program run locally as a real subprocess, and its lines decoded.

The GPU is the STAND-IN ``tests/standin/nvidia-smi`` (this machine has no NVIDIA GPU),
answering from the real H200 capture. The system python3 has no psutil, so these runs
also cover the /proc fallback for host figures.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from console.hostprogs.sampler import program as sampler_program
from console.hostprogs.sampler import schema as sample_schema
from console.hostprogs.sampler.simulated import job_of
from console.inventory import Host
from console.probe import nvsmi_csv, sampler
from console.transport.hello import HostProgramError
from console.transport.ship import STDIN_SOURCE

STANDIN_DIR = Path(__file__).resolve().parent.parent / "standin"


def _one_line(python: str, *args: str, path_first: Path | None = None) -> str:
    env = dict(os.environ)
    if path_first is not None:
        env["PATH"] = f"{path_first}:{env['PATH']}"
    done = subprocess.run(
        [python, "-u", "-", "0", *args],
        input=sampler.program_source(),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    hello, line = done.stdout.splitlines()
    assert sampler.SampleReader("h").read(hello) is None
    return line


def test_query_fields_match_the_parser() -> None:
    assert sample_schema.query_gpu() == nvsmi_csv.QUERY_GPU_FIELDS
    assert nvsmi_csv.QUERY_APPS_FIELDS == sample_schema.QUERY_APPS


@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="needs a system python3")
def test_standin_gpu_with_proc_host_figures() -> None:
    line = _one_line("/usr/bin/python3", "auto", "0", "h1", path_first=STANDIN_DIR)
    sample = sampler.decode_line("h1", line, now=123.0)
    assert sample.time == 123.0
    assert sample.gpu_source == "nvidia-smi"
    assert sample.host_source in ("proc", "psutil")
    assert sample.memory_total_mib and sample.memory_used_mib is not None
    assert sample.cpu_percent is not None and 0 <= sample.cpu_percent <= 100
    assert sample.load_1m is not None
    (gpu,) = sample.gpus
    assert (gpu.name, gpu.utilization_gpu, gpu.memory_used_mib) == ("NVIDIA H200", 100, 32362)
    assert gpu.fan_percent is None
    assert [p.pid for p in gpu.processes] == [10291, 10293, 10309]


def test_no_nvml_driver_no_nvidia_smi() -> None:
    # The venv has pynvml but no driver; PATH without nvidia-smi.
    env_path = "/usr/bin:/bin"
    done = subprocess.run(
        [sys.executable, "-u", "-", "0", "auto", "0", "h2"],
        input=sampler.program_source(),
        capture_output=True,
        text=True,
        env={"PATH": env_path},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    _hello, line = done.stdout.splitlines()
    sample = sampler.decode_line("h2", line)
    assert sample.gpus == ()
    assert sample.gpu_source == "none"
    assert sample.gpu_error is not None and "no NVIDIA GPU" in sample.gpu_error
    assert sample.host_source == "proc"  # this venv has psutil; /proc comes first


def test_host_figures_fall_back_to_psutil_without_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where /proc/stat cannot be read (not Linux), psutil gives the figures."""
    pytest.importorskip("psutil")
    from console.hostprogs.sampler.host import HostFigures

    monkeypatch.setattr(HostFigures, "_proc_cpu", staticmethod(lambda: None))
    figures = HostFigures()
    assert figures.source == "psutil"
    out = figures.sample()
    assert out["host_source"] == "psutil"
    assert isinstance(out["memory_total_mib"], float) and out["memory_total_mib"] > 0


def test_simulated_gpus_are_labelled() -> None:
    sample = sampler.decode_line("demo0", _one_line(sys.executable, "simulated", "8", "demo0"))
    assert sample.simulated and sample.gpu_source == "simulated"
    assert [g.index for g in sample.gpus] == list(range(8))
    assert all(g.name == "Simulated A100 80GB (simulated)" for g in sample.gpus)
    assert len({g.uuid for g in sample.gpus}) == 8


def test_job_of_reads_environment_and_ancestors() -> None:
    env = {"PATH": "/usr/bin:/bin", "DISTCONSOLE_JOB_ID": "j7", "RANK": "5", "LOCAL_RANK": "1"}
    parent = subprocess.Popen(
        ["bash", "-c", "env -u DISTCONSOLE_JOB_ID -u RANK sleep 30 & echo $!; wait"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert job_of(parent.pid) == {"job": "j7", "rank": 5, "local_rank": 1}
        # The child kept LOCAL_RANK but lost the job id and RANK: the parent supplies them.
        assert job_of(child) == {"job": "j7", "rank": 5, "local_rank": 1}
        assert job_of(os.getpid()) is None or os.environ.get("DISTCONSOLE_JOB_ID")
        assert job_of(2**22 + 12345) is None  # no such process
    finally:
        parent.kill()
        parent.wait()
        subprocess.run(["pkill", "-P", str(parent.pid)], check=False)


def test_decode_rejects_other_lines() -> None:
    with pytest.raises(ValueError, match="not JSON"):
        sampler.decode_line("h", "Traceback (most recent call last):")
    with pytest.raises(ValueError, match="unexpected"):
        sampler.decode_line("h", '{"v": 2}')


def test_reader_refuses_a_sampler_of_another_version() -> None:
    old_line = '{"v": 1, "t": 1.0, "gpu_source": "none", "host": {}}'  # before hellos
    with pytest.raises(HostProgramError, match=r"node7: sampler: .*versioned hello"):
        sampler.SampleReader("node7").read(old_line)
    newer = f'{{"program": "sampler", "v": {sampler_program.VERSION + 1}}}'
    with pytest.raises(HostProgramError, match="node7: sampler: speaks wire version"):
        sampler.SampleReader("node7").read(newer)
    reader = sampler.SampleReader("node7")
    with pytest.raises(ValueError, match="not JSON"):
        reader.read("conda: environment activated")  # setup noise is skipped, not fatal
    assert reader.read(f'{{"program": "sampler", "v": {sampler_program.VERSION}}}') is None


def test_commands_quote_values_and_run_setup_first() -> None:
    # model_construct: quoting must hold even for values the inventory would refuse.
    host = Host.model_construct(
        name="n 1",
        address="10.0.0.1",
        setup="source /opt/env/bin/activate",
        python="/opt/my python/bin/python3",
        gpus=8,
        gpu_source="simulated",
    )
    command = sampler.sampler_command(host, 0.5)
    # The source comes on stdin, read whole by ship.STDIN_SOURCE (python3 - reads it a
    # byte at a time).
    boot = "-u -c " + shlex.quote(STDIN_SOURCE)
    assert command == (
        f"{{ source /opt/env/bin/activate\n}} && exec '/opt/my python/bin/python3' {boot} 0.5 "
        "simulated 8 'n 1' 'Simulated A100 80GB (simulated)'"
    )
    real = Host.model_construct(name="r", address="10.0.0.2")
    # Every sampler gets the model's argument (the sixth, health's, comes after it).
    model = " 'Simulated A100 80GB (simulated)'"
    assert sampler.sampler_command(real, 1.0) == f"exec python3 {boot} 1 auto 0 r" + model
    assert sampler.nvsmi_loop_command(real, 1.0).startswith("exec nvidia-smi --query-gpu=index,")
    assert sampler.nvsmi_loop_command(real, 1.0).endswith(" -lms 1000")
    # Interval 0 (a one-shot snapshot): one query, nvidia-smi exits after it.
    once = sampler.nvsmi_loop_command(real, 0.0)
    assert once.startswith("exec nvidia-smi --query-gpu=index,") and "-lms" not in once
    assert sampler.sampler_command(real, 0.0) == f"exec python3 {boot} 0 auto 0 r" + model


def test_gpu_processes_asked_for_by_their_own_thread_and_refreshed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first answer is there for the first sample; a later change shows up; stop()
    ends the asking thread (nvidia-smi = the stand-in)."""
    import threading
    import time

    from console.hostprogs.sampler.gpus import APPS_EVERY_S, NvsmiStream

    monkeypatch.setenv("PATH", f"{STANDIN_DIR}:{Path(sys.executable).parent}:{os.environ['PATH']}")
    pids = tmp_path / "pids"
    monkeypatch.setenv("NVSMI_STANDIN_PIDS_FILE", str(pids))
    before = set(threading.enumerate())
    stream = NvsmiStream(0.1)
    try:
        rows, error = stream.apps()
        assert error is None
        assert [row.split(",")[1].strip() for row in rows] == ["10291", "10293", "10309"]
        pids.write_text("4242\n")
        deadline = time.monotonic() + 10 * APPS_EVERY_S
        while "4242" not in ",".join(stream.apps()[0]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stream.apps()[0][0].split(",")[1].strip() == "4242"
    finally:
        stream.stop()
    for thread in set(threading.enumerate()) - before:
        thread.join(timeout=10)
        assert not thread.is_alive(), thread


@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="needs a system python3")
def test_one_shot_waits_for_a_slow_nvidia_smi(tmp_path: Path) -> None:
    """A busy host's nvidia-smi can take well over a second to start: the one-shot
    sample (``gpus`` without --watch) waits for its first row instead of reporting the
    host without GPUs (it waited 1 s, and a loaded 64-host run lost a host's GPUs)."""
    slow = tmp_path / "nvidia-smi"
    slow.write_text(f'#!/bin/sh\nsleep 1.5\nexec "{STANDIN_DIR / "nvidia-smi"}" "$@"\n')
    slow.chmod(0o755)
    line = _one_line("/usr/bin/python3", "auto", "0", "h1", path_first=tmp_path)
    sample = sampler.decode_line("h1", line)
    assert sample.gpu_source == "nvidia-smi"
    assert [g.name for g in sample.gpus] == ["NVIDIA H200"], sample.gpu_error
