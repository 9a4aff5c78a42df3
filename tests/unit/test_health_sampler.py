"""The sampler's health reading, run for real as a subprocess, and its decoding.

GPUs: the nvidia-smi STAND-IN (``tests/standin/nvidia-smi``; no GPU here) replaying the
real H200 capture, or its altered copy with faults set (``csv_h200-faults``: two
uncorrectable ECC errors and a row remap pending, see tests/data/nvidia-smi/SOURCES.md),
and the stand-in that never answers (``tests/standin/hung/nvidia-smi``). The NVML path
cannot run without a GPU: its Xid event decoding is tested here on plain objects, and
``nvml_health`` on a FAKE pynvml module (named as such below).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from console.hostprogs.sampler import health as host_health
from console.hostprogs.sampler import schema
from console.probe import sampler
from console.probe.health import host_verdicts
from console.probe.health_models import decode_health, pci_key
from console.probe.models import HostView
from console.transport.base import HostState

TESTS = Path(__file__).resolve().parent.parent
STANDIN = TESTS / "standin"
DATA = TESTS / "data" / "nvidia-smi"


def sample_lines(path_first: Path, *, capture: str = "csv_h200", interval: str = "0") -> list[str]:
    env = dict(os.environ, PATH=f"{path_first}:{os.environ['PATH']}")
    env["NVSMI_STANDIN_CAPTURE"] = str(DATA / capture)
    done = subprocess.run(
        [sys.executable, "-u", "-", interval, "auto", "0", "h"],
        input=sampler.program_source(),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def view_of(lines: list[str]) -> HostView:
    reader = sampler.SampleReader("node1")
    samples = [s for s in (reader.read(ln) for ln in lines) if s is not None]
    return HostView("node1", HostState.UP, "", samples[-1])


def test_faulty_capture_fails_the_gpu_naming_ecc_and_remap() -> None:
    lines = sample_lines(STANDIN, capture="csv_h200-faults")
    raw = json.loads(lines[1])
    assert tuple(raw["health"]) == schema.HEALTH_KEYS
    assert raw["health"]["source"] == "nvidia-smi" and raw["health"]["error"] is None
    health = view_of(lines).sample.health  # type: ignore[union-attr]
    assert health is not None
    gpu = health.gpu(0)
    assert gpu is not None and gpu.pci_bus_id == "00000000:83:00.0"
    assert gpu.ecc_uncorrected_volatile == 2 and gpu.remapped_rows_pending == "Yes"
    (verdict,) = [v for v in host_verdicts(view_of(lines)) if v.gpu == 0]
    assert verdict.state == "fail"
    assert "2 uncorrectable ECC error(s) since the last reset" in verdict.reasons
    assert "row remap pending (reset the GPU)" in verdict.reasons
    assert verdict.since is not None


def test_real_capture_reads_every_health_field_and_no_ecc_fault() -> None:
    gpu = view_of(sample_lines(STANDIN)).sample.health.gpu(0)  # type: ignore[union-attr]
    assert gpu is not None
    assert (gpu.ecc_uncorrected_volatile, gpu.ecc_corrected_aggregate) == (0, 0)
    assert (gpu.remapped_rows_pending, gpu.remapped_rows_failure) == ("No", "No")
    assert gpu.retired_pages_pending is None  # [N/A] on the H200: not reported, not "No"
    assert gpu.recovery_action is None and gpu.clock_events == 0
    assert (gpu.pcie_gen, gpu.pcie_gen_max, gpu.pcie_width, gpu.pcie_width_max) == (5, 5, 16, 16)


def test_nvidia_smi_that_never_answers_is_a_host_finding_within_the_bound() -> None:
    started = time.monotonic()
    lines = sample_lines(STANDIN / "hung")
    took = time.monotonic() - started
    assert took < 20, f"the one-shot sampler waited {took:.1f}s on a hung nvidia-smi"
    raw = json.loads(lines[1])
    assert "not answering" in raw["gpu_error"]
    view = view_of(lines)
    rows = host_verdicts(view)
    host_row = next(v for v in rows if v.gpu is None)
    assert host_row.state == "fail" and "not answering" in host_row.reasons[0]
    assert host_row.since is not None and host_row.since <= time.time()


def test_streaming_sampler_reports_a_hung_nvidia_smi_and_keeps_writing() -> None:
    env = dict(os.environ, PATH=f"{STANDIN / 'hung'}:{os.environ['PATH']}")
    proc = subprocess.Popen(
        [sys.executable, "-u", "-", "0.5", "auto", "0", "h"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(sampler.program_source())
        proc.stdin.close()
        started = time.monotonic()
        reader = sampler.SampleReader("node1")
        while True:
            sample = reader.read(proc.stdout.readline())
            if sample is not None and sample.health and sample.health.error:
                break
            assert time.monotonic() - started < 30, "no 'not answering' within 30 s"
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert sample.health.error == "nvidia-smi not answering"
    assert sample.gpu_error and "not answering" in sample.gpu_error


def test_unknown_fields_are_dropped_not_fatal(tmp_path: Path) -> None:
    """An older driver refuses the whole query for one field it does not know: the health
    reader drops that field and asks again (the stand-in refuses like nvidia-smi)."""
    header = (DATA / "csv_h200_query-gpu.csv").read_text().splitlines()[0].split(", ")
    row = (DATA / "csv_h200_query-gpu.csv").read_text().splitlines()[1].split(", ")
    keep = [i for i, h in enumerate(header) if not h.startswith("gpu_recovery_action")]
    (tmp_path / "old_query-gpu.csv").write_text(
        ", ".join(header[i] for i in keep) + "\n" + ", ".join(row[i] for i in keep) + "\n"
    )
    (tmp_path / "old_compute-apps.csv").write_text((DATA / "csv_h200_compute-apps.csv").read_text())
    lines = sample_lines(STANDIN, capture=str(tmp_path / "old"))
    health = json.loads(lines[1])["health"]
    assert "gpu_recovery_action" not in health["nvsmi"]["fields"]
    assert view_of(lines).sample.health.gpu(0).remapped_rows_pending == "No"  # type: ignore[union-attr]


def test_an_older_driver_is_asked_for_the_older_name_of_a_field(tmp_path: Path) -> None:
    """Before R535 nvidia-smi calls clocks event reasons "clocks_throttle_reasons": a copy
    of the H200 capture with that column renamed (written here) stands for such a driver."""
    text = (DATA / "csv_h200_query-gpu.csv").read_text()
    renamed = text.replace("clocks_event_reasons.active", "clocks_throttle_reasons.active")
    assert renamed != text
    (tmp_path / "r530_query-gpu.csv").write_text(renamed)
    (tmp_path / "r530_compute-apps.csv").write_text(
        (DATA / "csv_h200_compute-apps.csv").read_text()
    )
    lines = sample_lines(STANDIN, capture=str(tmp_path / "r530"))
    fields = json.loads(lines[1])["health"]["nvsmi"]["fields"]
    assert (
        "clocks_throttle_reasons.active" in fields and "clocks_event_reasons.active" not in fields
    )
    assert view_of(lines).sample.health.gpu(0).clock_events == 0  # type: ignore[union-attr]


def test_xid_lines_parse_with_and_without_a_pid() -> None:
    found = host_health.parse_xid(
        "NVRM: Xid (PCI:0000:83:00): 79, pid=1, GPU has fallen off the bus.", 5.0, "kmsg"
    )
    assert found == {
        "t": 5.0,
        "xid": 79,
        "pci": "0000:83:00",
        "gpu": None,
        "text": "pid=1, GPU has fallen off the bus.",
        "source": "kmsg",
    }
    newer = "NVRM: Xid (PCI:0000:3B:00): 48, pid='<unknown>', name=<unknown>, DBE (0x1)"
    assert host_health.parse_xid(newer, 1.0, "journalctl")["pci"] == "0000:3b:00"  # type: ignore[index]
    assert (
        host_health.parse_xid("NVRM: loading NVIDIA UNIX x86_64 Kernel Module", 1, "kmsg") is None
    )
    assert pci_key("00000000:3B:00.0") == pci_key("0000:3b:00") == (0, 0x3B, 0)


def test_nvml_xid_events_decode() -> None:
    """NVML's event set cannot run here (no GPU): its records are decoded from objects
    shaped like pynvml's c_nvmlEventData_t."""
    handles = {"dev-a": 0, "dev-b": 5}
    event = SimpleNamespace(device="dev-b", eventType=0x8, eventData=79)
    found = host_health.decode_nvml_event(event, handles.get, 12.5)
    assert found == {"t": 12.5, "xid": 79, "pci": None, "gpu": 5, "text": None, "source": "nvml"}
    other = SimpleNamespace(device="dev-a", eventType=0x1, eventData=0)  # a single-bit ECC event
    assert host_health.decode_nvml_event(other, handles.get, 1.0) is None
    health = decode_health({"xids": [found], "gpus": [], "source": "nvml"})
    assert health is not None and health.xids[0].gpu == 5


class FakePynvml:
    """A FAKE pynvml (no GPU here): the calls nvml_health makes, with a GPU that has a
    row remap pending, HW thermal slowdown, 2 of 18 NVLink links down and a failed fan."""

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_MEMORY_ERROR_TYPE_CORRECTED = 1, 0
    NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1
    NVML_NVLINK_MAX_LINKS = 36
    NVML_ERROR_NOT_SUPPORTED = 3

    class Error(Exception):
        def __init__(self, value: int) -> None:
            self.value = value

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"h{i}"

    def nvmlDeviceGetPciInfo(self, h: str) -> Any:
        return SimpleNamespace(busId=b"00000000:83:00.0")

    def nvmlDeviceGetTotalEccErrors(self, h: str, kind: int, counter: int) -> int:
        return 7 if kind == 0 and counter == 1 else 0

    def nvmlDeviceGetRemappedRows(self, h: str) -> tuple[int, int, int, int]:
        return (0, 1, 1, 0)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: str) -> int:
        raise self.Error(3)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: str) -> int:
        return 0x40

    def nvmlDeviceGetFieldValues(self, h: str, ids: list[int]) -> list[Any]:
        return [SimpleNamespace(nvmlReturn=0, value=SimpleNamespace(uiVal=0))]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: str) -> int:
        return 5

    nvmlDeviceGetMaxPcieLinkGeneration = nvmlDeviceGetCurrPcieLinkGeneration

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: str) -> int:
        return 8

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: str) -> int:
        return 16

    def nvmlDeviceGetFanSpeed(self, h: str) -> int:
        raise self.Error(999)  # NVML_ERROR_UNKNOWN

    def nvmlDeviceGetNvLinkState(self, h: str, link: int) -> int:
        if link >= 18:
            raise self.Error(3)
        return 0 if link in (4, 9) else 1


def test_nvml_health_reading_on_a_fake_pynvml() -> None:
    (raw,) = host_health.nvml_health(FakePynvml(), 1)
    assert tuple(raw) == schema.names(schema.HEALTH_FIELDS)
    health = decode_health({"source": "nvml", "t": 1.0, "gpus": [raw], "xids": []})
    assert health is not None
    gpu = health.gpus[0]
    assert gpu.pci_bus_id == "00000000:83:00.0" and gpu.ecc_corrected_aggregate == 7
    assert gpu.remapped_rows_pending == "Yes" and gpu.retired_pages_pending is None
    assert (gpu.nvlink_active, gpu.nvlink_inactive, gpu.fan) == (16, 2, "ERR!")
    assert gpu.recovery_action is None and gpu.clock_events == 0x40
