"""The GPU sample schema is declared once (``console/hostprogs/sampler/schema.py``): the
host-side producer, run for real, emits exactly its keys, and the console's models and
parsers read the same names.

GPUs: simulated mode (no NVIDIA GPU here), and the nvidia-smi STAND-IN
(``tests/standin/nvidia-smi``, replaying a real H200 capture) for the nvidia-smi path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import fields
from typing import Any

import pytest
from gpu_standin import readable_standin_dir

from console.hostprogs.sampler import program as sampler_program
from console.hostprogs.sampler import schema
from console.probe import nvsmi_csv, sampler
from console.probe.health_models import GpuHealth
from console.probe.models import GpuProcess, GpuSample, HostSample, gpu_to_json

TYPES = {"int": "int", "float": "float", "str": "str"}


def _lines(*args: str, env: dict[str, str] | None = None, count: int = 2) -> list[dict[str, Any]]:
    """The real sampler's hello and first ``count`` sample lines, as JSON."""
    proc = subprocess.Popen(
        [sys.executable, "-u", "-", "0.2", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(sampler.program_source())
        proc.stdin.close()
        lines = [json.loads(proc.stdout.readline()) for _ in range(count + 1)]
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert lines[0] == {"program": sampler_program.PROGRAM, "v": sampler_program.VERSION}
    return lines[1:]


def _check_common(line: dict[str, Any]) -> None:
    assert tuple(line) == schema.LINE_KEYS
    assert tuple(line["host"]) == schema.names(schema.HOST_FIELDS)
    for owner in line["procs"].values():
        assert tuple(owner) == schema.names(schema.PROCESS_OWNER_FIELDS)


@pytest.fixture
def job_process() -> Any:
    """A real process of a "job" (carries the job id), so GPUs have processes to report."""
    env = dict(os.environ, DISTCONSOLE_JOB_ID="contract-1", LOCAL_RANK="0", RANK="0")
    proc = subprocess.Popen(["sleep", "60"], env=env)
    yield proc
    proc.kill()
    proc.wait()


def test_simulated_producer_emits_exactly_the_schema(job_process: Any) -> None:
    for line in _lines("simulated", "2", "node0"):
        _check_common(line)
        assert line["nvsmi"] is None and len(line["gpus"]) == 2
        for gpu in line["gpus"]:
            assert tuple(gpu) == (*schema.names(schema.GPU_FIELDS), schema.GPU_PROCESSES)
            for proc in gpu[schema.GPU_PROCESSES]:
                assert tuple(proc) == schema.names(schema.PROCESS_FIELDS)
    gpus = [g for line in _lines("simulated", "2", "node0") for g in line["gpus"]]
    assert any(p["pid"] == job_process.pid for g in gpus for p in g["processes"])


def test_standin_producer_emits_exactly_the_schema() -> None:
    env = dict(os.environ, PATH=f"{readable_standin_dir()}:{os.environ['PATH']}")
    line = _lines("auto", "0", "node0", env=env, count=1)[0]
    _check_common(line)
    assert line["gpu_source"] == "nvidia-smi" and line["gpus"] is None
    nvsmi = line["nvsmi"]
    assert tuple(nvsmi) == schema.NVSMI_KEYS
    assert tuple(nvsmi["fields"]) == schema.query_gpu() == nvsmi_csv.QUERY_GPU_FIELDS
    assert tuple(nvsmi["apps_fields"]) == schema.QUERY_APPS
    # The stand-in answers one cell per asked field: the query names are ones it knows.
    (row,) = nvsmi["rows"]
    assert len(row.split(",")) == len(schema.GPU_FIELDS)
    assert set(line["procs"]) == {"10291", "10293", "10309"}


def _annotation(kind: str) -> str:
    return f"{TYPES[kind]} | None"


def test_console_models_are_the_schema() -> None:
    gpu = {f.name: f.type for f in fields(GpuSample)}
    assert tuple(gpu) == (*schema.names(schema.GPU_FIELDS), schema.GPU_PROCESSES)
    for name, kind, _query in schema.GPU_FIELDS:
        assert gpu[name] == ("int" if name == "index" else _annotation(kind)), name
    proc = {f.name: f.type for f in fields(GpuProcess)}
    for name, kind in (*schema.PROCESS_FIELDS, *schema.PROCESS_OWNER_FIELDS):
        assert proc[name] == ("int" if name == "pid" else _annotation(kind)), name
    own = set(schema.names(schema.PROCESS_FIELDS)) | set(schema.names(schema.PROCESS_OWNER_FIELDS))
    assert set(proc) == own
    host = {f.name: f.type for f in fields(HostSample)}
    for name, kind in schema.HOST_FIELDS:
        assert host[name] == _annotation(kind), name
    extra = set(host) - set(schema.names(schema.HOST_FIELDS))
    assert extra == {"name", "time", "gpu_source", "gpus", "gpu_error", "simulated", "health"}
    health = {f.name: f.type for f in fields(GpuHealth)}
    assert tuple(health) == schema.names(schema.HEALTH_FIELDS)
    for name, kind, _query in schema.HEALTH_FIELDS:
        assert health[name] == ("int" if name == "index" else _annotation(kind)), name


def test_decoded_and_json_shapes_follow_the_schema(job_process: Any) -> None:
    line = _lines("simulated", "1", "node0", count=1)[0]
    sample = sampler.decode_record("node0", line)
    (gpu,) = sample.gpus
    assert tuple(gpu_to_json(gpu)) == (*schema.names(schema.GPU_FIELDS), schema.GPU_PROCESSES)
    for name in schema.names(schema.GPU_FIELDS):
        assert getattr(gpu, name) == line["gpus"][0][name], name
    assert sample.memory_total_mib == line["host"]["memory_total_mib"]


def test_record_refuses_a_key_outside_the_schema() -> None:
    with pytest.raises(KeyError, match="not in the sample schema: gpu_util"):
        schema.record(schema.GPU_FIELDS, {"index": 0, "gpu_util": 5})
