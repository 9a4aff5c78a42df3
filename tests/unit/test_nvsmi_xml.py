"""XML parser against real captured `nvidia-smi -q -x` output across DTD versions."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.probe.nvsmi_xml import parse_xml

DATA = Path(__file__).resolve().parent.parent / "data" / "nvidia-smi"
XML_FILES = sorted(DATA.glob("xml_*.xml"))


def _gpu_count(path: Path) -> int:
    return int(path.stem.rsplit("_", 1)[1].removesuffix("gpu"))


def test_fixture_set_is_complete() -> None:
    assert len(XML_FILES) == 10


@pytest.mark.parametrize("path", XML_FILES, ids=lambda p: p.name)
def test_every_xml_capture_parses(path: Path) -> None:
    gpus = parse_xml(path.read_bytes())
    assert len(gpus) == _gpu_count(path)
    for i, gpu in enumerate(gpus):
        assert gpu.index == i
        assert gpu.uuid and gpu.uuid.startswith("GPU-")
        assert gpu.name
        assert gpu.memory_total_mib and gpu.memory_total_mib > 0
        assert gpu.memory_used_mib is not None
        assert gpu.temperature_c is not None
        assert gpu.power_draw_w is not None and gpu.power_limit_w is not None
        assert gpu.pstate and gpu.pstate.startswith("P")


def test_v100s_eight_gpus_known_values() -> None:
    gpus = parse_xml((DATA / "xml_v100s-pcie-32gb_8gpu.xml").read_bytes())
    first, last = gpus[0], gpus[7]
    assert first.name == "Tesla V100S-PCIE-32GB"
    assert first.uuid == "GPU-76098dc1-d3bc-9a1b-7ea6-f7b48837829e"
    assert (first.utilization_gpu, first.memory_used_mib, first.memory_total_mib) == (
        97.0,
        31689.0,
        32510.0,
    )
    assert (first.temperature_c, first.power_draw_w, first.power_limit_w) == (66.0, 232.8, 250.0)
    assert first.fan_percent is None
    assert first.ecc_corrected == 0 and first.ecc_uncorrected == 0  # old single_bit/double_bit
    assert [(p.pid, p.command, p.used_memory_mib) for p in first.processes] == [
        (37305, "python", 31683.0)
    ]
    assert last.utilization_gpu == 99.0


def test_a100_mig_has_no_utilization() -> None:
    (gpu,) = parse_xml((DATA / "xml_a100-sxm4-80gb-mig_1gpu.xml").read_bytes())
    assert gpu.mig_mode == "Enabled"
    assert gpu.utilization_gpu is None
    assert gpu.memory_total_mib == 81920.0


def test_r535_power_and_processes() -> None:
    (gpu,) = parse_xml((DATA / "xml_rtx-3080_1gpu.xml").read_bytes())
    assert gpu.power_draw_w == 22.78  # gpu_power_readings/power_draw
    assert gpu.power_limit_w == 336.0  # current_power_limit
    assert gpu.ecc_corrected is None  # consumer board: no ECC, not 0
    assert len(gpu.processes) == 5
    assert gpu.processes[2].command is not None and "," in gpu.processes[2].command


def test_r550_instant_power_and_deprecated_clocks() -> None:
    (gpu,) = parse_xml((DATA / "xml_rtx-4000-sff-ada_1gpu.xml").read_bytes())
    assert gpu.power_draw_w == 8.44  # instant_power_draw
    assert gpu.clock_mem_mhz == 405.0
    assert [p.type for p in gpu.processes] == ["G", "G", "C", "C+G"]


def test_graphics_device_old_driver() -> None:
    (gpu,) = parse_xml((DATA / "xml_gtx-1660-ti-graphics-device_1gpu.xml").read_bytes())
    assert gpu.name == "Graphics Device"
    assert gpu.power_limit_w == 130.0
    assert gpu.mig_mode is None


def test_broken_xml_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="does not parse"):
        parse_xml("<nvidia_smi_log><gpu>")
