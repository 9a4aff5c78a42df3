"""Pre-flight's health gate (``console/jobs/preflight/health_gate.py``): pure rules."""

from __future__ import annotations

import pytest

from console.errors import JobSpecError
from console.inventory import Host, Inventory
from console.jobs.models import JobKind
from console.jobs.preflight.checks import HostRequest
from console.jobs.preflight.health_gate import exclude_unhealthy, job_gpus, judge_health
from console.jobs.spec import JobSpec
from console.probe.health import GpuVerdict


def hosts(*names: str, gpus: int = 4) -> Inventory:
    return Inventory(
        path="hosts.yaml",
        hosts=tuple(Host(name=n, address=f"10.0.0.{i}", gpus=gpus) for i, n in enumerate(names)),
    )


def test_a_failing_gpu_of_the_job_is_an_error_naming_host_gpu_reason_and_the_way_on() -> None:
    inv = hosts("n1", "n2")
    requests = [HostRequest(host=inv.get("n1"), gpus=2), HostRequest(host=inv.get("n2"), gpus=2)]
    rows = [
        GpuVerdict("n1", 0, "ok"),
        GpuVerdict("n1", 1, "fail", ("row remap pending (reset the GPU)",), 1.0),
        GpuVerdict("n1", 3, "fail", ("Xid 79 (GPU has fallen off the bus) at 12:00:00",), 1.0),
        GpuVerdict("n2", 0, "warn", ("PCIe link x8 of x16",), 1.0),
    ]
    found = judge_health(requests, rows)
    assert [(f.host, f.severity) for f in found] == [("n1", "error"), ("n2", "warning")]
    assert found[0].line() == (
        "FAIL [health] n1: GPU 1 fails its health check: row remap pending (reset the GPU); "
        "launch with --exclude-unhealthy to place the job on the other GPUs/hosts, "
        "or --allow-unhealthy to start anyway"
    )  # GPU 3 is not the job's (2 slots: GPUs 0 and 1)
    assert found[1].line() == "WARN [health] n2: GPU 0 health warning: PCIe link x8 of x16"
    allowed = judge_health(requests, rows, allow=True)
    assert [f.severity for f in allowed] == ["warning", "warning"]
    assert "started anyway (--allow-unhealthy)" in allowed[0].message


def test_a_host_level_failure_and_a_cpu_only_request() -> None:
    inv = hosts("n1", "n2")
    rows = [GpuVerdict("n1", None, "fail", ("nvidia-smi not answering",), 1.0)]
    found = judge_health([HostRequest(host=inv.get("n1"), gpus=1)], rows)
    assert found[0].message.startswith("the host fails its health check: nvidia-smi not answering")
    assert judge_health([HostRequest(host=inv.get("n1"), gpus=0)], rows) == []


def test_job_gpus_follow_cuda_visible_devices() -> None:
    host = Host(name="n", address="a", env={"CUDA_VISIBLE_DEVICES": "0,2,3"})
    assert job_gpus(host, 2) == [0, 2]
    assert job_gpus(Host(name="n", address="a"), 2) == [0, 1]


def test_exclude_keeps_the_healthy_gpus_and_drops_hosts_with_too_few() -> None:
    inv = hosts("n1", "n2", "n3")
    spec = JobSpec(kind=JobKind.DDP, program="train.py")
    rows = [
        GpuVerdict("n1", 1, "fail", ("row remap pending (reset the GPU)",), 1.0),
        GpuVerdict("n2", None, "fail", ("host down",), 1.0),
        GpuVerdict("n3", 0, "warn", ("hot (90 C)",), 1.0),
    ]
    new_inv, new_spec, notes = exclude_unhealthy(inv, spec, ("n1", "n2", "n3"), rows)
    assert new_spec.hosts == ("n1", "n3")
    n1 = new_inv.get("n1")
    assert n1.env["CUDA_VISIBLE_DEVICES"] == "0,2,3" and n1.gpus == 3
    assert new_inv.get("n3") == inv.get("n3")
    assert notes == [
        "n1: GPU 1 left out; the job uses GPU 0,2,3",
        "n2 left out: the host fails its health check",
    ]
    four = JobSpec(kind=JobKind.DDP, program="train.py", gpus_per_host=4)
    _, spec4, notes4 = exclude_unhealthy(inv, four, ("n1", "n3"), rows)
    assert spec4.hosts == ("n3",) and notes4 == ["n1 left out: GPU 1 failing and 3 healthy left"]
    with pytest.raises(JobSpecError, match="left no host"):
        exclude_unhealthy(inv, spec, ("n2",), rows)
