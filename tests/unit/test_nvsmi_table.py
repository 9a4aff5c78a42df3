"""Default-table parser against real captured `nvidia-smi` tables (80 and 90 columns)."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.probe.nvsmi_table import parse_table

DATA = Path(__file__).resolve().parent.parent / "data" / "nvidia-smi"
TABLE_FILES = sorted(DATA.glob("table_*.txt"))


def test_fixture_set_is_complete() -> None:
    assert len(TABLE_FILES) == 8


@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda p: p.name)
def test_every_table_parses(path: Path) -> None:
    gpus = parse_table(path.read_text())
    expected = 8 if "8gpu" in path.name else 1
    assert [g.index for g in gpus] == list(range(expected))
    for gpu in gpus:
        assert gpu.name
        assert gpu.memory_total_mib and gpu.memory_used_mib is not None
        assert gpu.temperature_c is not None
        assert gpu.power_limit_w is not None


def test_h200_table_values_and_processes() -> None:
    (gpu,) = parse_table((DATA / "table_h200.txt").read_text())
    assert gpu.name == "NVIDIA H200"
    assert gpu.utilization_gpu == 100.0
    assert (gpu.memory_used_mib, gpu.memory_total_mib) == (32362.0, 143771.0)
    assert (gpu.temperature_c, gpu.power_draw_w, gpu.power_limit_w) == (52.0, 628.0, 700.0)
    assert gpu.fan_percent is None
    assert gpu.mig_mode == "Disabled"
    assert [(p.pid, p.command, p.used_memory_mib, p.type) for p in gpu.processes] == [
        (10291, "/root/tools/memhog", 2566.0, "C"),
        (10293, "/root/tools/memhog", 1542.0, "C"),
        (10309, "./gpu_burn", 28234.0, "C"),
    ]


def test_err_fan_becomes_not_reported() -> None:
    (gpu,) = parse_table((DATA / "table_geforce-err-fan_1gpu.txt").read_text())
    assert gpu.fan_percent is None  # "ERR!"
    assert (gpu.temperature_c, gpu.pstate, gpu.power_draw_w) == (38.0, "P5", 49.0)
    assert gpu.utilization_gpu == 0.0


def test_mig_table_skips_mig_devices_and_keeps_processes() -> None:
    (gpu,) = parse_table((DATA / "table_h100-80gb-hbm3-mig.txt").read_text())
    assert gpu.mig_mode == "Enabled"
    assert gpu.utilization_gpu is None
    assert [p.pid for p in gpu.processes] == [21180, 21181, 21198]


def test_eight_gpus_no_processes() -> None:
    gpus = parse_table((DATA / "table_h100-80gb-hbm3_8gpu.txt").read_text())
    assert [g.temperature_c for g in gpus] == [27, 24, 23, 23, 27, 22, 24, 23]
    assert all(g.processes == () for g in gpus)


def test_windows_processes_without_memory() -> None:
    (gpu,) = parse_table((DATA / "table_rtx-2080-super-windows-610.txt").read_text())
    assert gpu.fan_percent == 38.0
    assert len(gpu.processes) == 21
    assert all(p.used_memory_mib is None for p in gpu.processes)
    assert gpu.processes[0].type == "C+G"


def test_not_a_table() -> None:
    assert parse_table("NVIDIA-SMI has failed because it couldn't communicate") == ()
