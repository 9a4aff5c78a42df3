"""CSV parser against real captured `nvidia-smi --query-*` output (tests/data/nvidia-smi)."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.probe.nvsmi_csv import (
    QUERY_APPS_FIELDS,
    QUERY_GPU_FIELDS,
    attach_processes,
    parse_compute_apps,
    parse_query_gpu,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "nvidia-smi"
# The real captures; a copy altered for a test (``-faults``: health faults set; ``-slow``:
# a throttled, narrowed GPU; each said so in SOURCES.md) is not one more capture.
DERIVED = ("-faults", "-slow")
QUERY_FILES = sorted(
    p for p in DATA.glob("csv_*_query-gpu.csv") if not any(d in p.name for d in DERIVED)
)
APPS_FILES = sorted(
    p for p in DATA.glob("csv_*_compute-apps.csv") if not any(d in p.name for d in DERIVED)
)
GTX770_FIELDS = [
    "gpu_name",
    "utilization.gpu",
    "utilization.memory",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "fan.speed",
    "pstate",
    "clocks.current.graphics",
    "clocks.current.memory",
    "power.max_limit",
    "power.default_limit",
]


def test_fixture_set_is_complete() -> None:
    assert len(QUERY_FILES) == 5
    assert len(APPS_FILES) == 4


@pytest.mark.parametrize("path", QUERY_FILES, ids=lambda p: p.name)
def test_every_query_gpu_capture_parses(path: Path) -> None:
    gpus = parse_query_gpu(path.read_text())
    assert len(gpus) == 1
    gpu = gpus[0]
    assert gpu.index == 0
    assert gpu.name and gpu.name.startswith("NVIDIA")
    assert gpu.uuid == "GPU-00000000-0000-0000-0000-000000000000"
    assert gpu.memory_total_mib and gpu.memory_total_mib > 0
    assert gpu.memory_used_mib is not None and 0 < gpu.memory_used_mib < gpu.memory_total_mib
    assert gpu.temperature_c is not None and 20 < gpu.temperature_c < 100
    assert gpu.power_limit_w is not None and gpu.power_limit_w >= 250


@pytest.mark.parametrize("path", APPS_FILES, ids=lambda p: p.name)
def test_every_compute_apps_capture_parses(path: Path) -> None:
    apps = parse_compute_apps(path.read_text())
    assert apps
    assert all(a.process.pid > 0 and a.process.command for a in apps)
    assert all(a.gpu_uuid == "GPU-00000000-0000-0000-0000-000000000000" for a in apps)


def test_h200_known_values() -> None:
    (gpu,) = parse_query_gpu((DATA / "csv_h200_query-gpu.csv").read_text())
    assert gpu.name == "NVIDIA H200"
    assert gpu.utilization_gpu == 100.0
    assert gpu.utilization_memory == 7.0
    assert gpu.memory_used_mib == 32362.0
    assert gpu.memory_total_mib == 143771.0
    assert gpu.temperature_c == 52.0
    assert gpu.power_draw_w == 627.40
    assert gpu.power_limit_w == 700.0
    assert gpu.pstate == "P0"
    assert gpu.clock_sm_mhz == 1980.0
    assert gpu.clock_mem_mhz == 3201.0
    assert gpu.ecc_corrected == 0 and gpu.ecc_uncorrected == 0
    assert gpu.mig_mode == "Disabled"
    assert gpu.fan_percent is None  # "[N/A]" on a passively cooled board, not 0


def test_h200_processes_attach_to_the_gpu() -> None:
    gpus = parse_query_gpu((DATA / "csv_h200_query-gpu.csv").read_text())
    apps = parse_compute_apps((DATA / "csv_h200_compute-apps.csv").read_text())
    (gpu,) = attach_processes(gpus, apps)
    assert [(p.pid, p.command, p.used_memory_mib) for p in gpu.processes] == [
        (10291, "/root/tools/memhog", 2566.0),
        (10293, "/root/tools/memhog", 1542.0),
        (10309, "./gpu_burn", 28234.0),
    ]


def test_mig_enabled_h100_reports_no_utilization() -> None:
    (gpu,) = parse_query_gpu((DATA / "csv_h100-80gb-hbm3-mig_query-gpu.csv").read_text())
    assert gpu.mig_mode == "Enabled"
    assert gpu.utilization_gpu is None  # MIG mode: "[N/A]"
    assert gpu.memory_used_mib == 11125.0


def test_l40s_without_mig_support() -> None:
    (gpu,) = parse_query_gpu((DATA / "csv_l40s_query-gpu.csv").read_text())
    assert gpu.mig_mode is None
    assert gpu.utilization_gpu == 9.0
    assert gpu.power_draw_w == 110.23


def test_windows_2080_deprecated_and_missing_values() -> None:
    (gpu,) = parse_query_gpu((DATA / "csv_rtx-2080-super-windows_query-gpu.csv").read_text())
    assert gpu.fan_percent == 38.0
    assert gpu.ecc_corrected is None and gpu.ecc_uncorrected is None
    assert gpu.memory_used_mib == 1366.0


def test_windows_apps_without_memory_are_not_zero() -> None:
    apps = parse_compute_apps((DATA / "csv_rtx-2080-super-windows_compute-apps.csv").read_text())
    assert len(apps) == 21
    assert all(a.process.used_memory_mib is None for a in apps)


def test_noheader_gtx770_not_supported_values() -> None:
    text = (DATA / "csv_gtx-770-windows_query-gpu_noheader.csv").read_text()
    (gpu,) = parse_query_gpu(text, fields=GTX770_FIELDS)
    assert gpu.name == "GeForce GTX 770"
    assert gpu.utilization_gpu is None
    assert gpu.power_draw_w is None
    assert gpu.power_limit_w is None
    assert gpu.clock_mem_mhz is None
    assert gpu.temperature_c == 52.0
    assert gpu.fan_percent == 52.0
    assert gpu.pstate == "P0"


def test_noheader_nounits_rows_in_sampler_field_order() -> None:
    rows = [
        "0, GPU-aaaa, NVIDIA H200, 100, 7, 32362, 143771, 52, 627.40, 700.00, [N/A], P0, 1980,"
        " 3201, 0, 0, Disabled",
        "1, GPU-bbbb, NVIDIA H200, ERR!, [Not Supported], 1, 143771, 30, [Unknown Error], 700.00,"
        " N/A, P8, 345, 3201, [N/A], [N/A], Disabled",
    ]
    a, b = parse_query_gpu(rows, fields=QUERY_GPU_FIELDS)
    assert (a.index, a.utilization_gpu, a.memory_used_mib, a.power_draw_w) == (0, 100, 32362, 627.4)
    assert b.index == 1
    assert b.utilization_gpu is None
    assert b.utilization_memory is None
    assert b.power_draw_w is None
    assert b.fan_percent is None
    assert b.ecc_corrected is None


def test_unquoted_command_with_commas_stays_one_field() -> None:
    rows = ["GPU-aaaa, 4242, python train.py --sizes=1,2,3, 1024"]
    (app,) = parse_compute_apps(rows, fields=QUERY_APPS_FIELDS)
    assert app.process.pid == 4242
    assert app.process.command == "python train.py --sizes=1, 2, 3"
    assert app.process.used_memory_mib == 1024.0


def test_processes_go_to_the_gpu_with_their_uuid() -> None:
    gpus = parse_query_gpu(
        [
            "0, GPU-a, X, 1, 1, 1, 2, 30, 1, 2, 0, P0, 1, 1, 0, 0, Disabled",
            "1, GPU-b, X, 1, 1, 1, 2, 30, 1, 2, 0, P0, 1, 1, 0, 0, Disabled",
        ],
        fields=QUERY_GPU_FIELDS,
    )
    apps = parse_compute_apps(["GPU-b, 7, python, 100", "GPU-a, 8, python, 200"], QUERY_APPS_FIELDS)
    a, b = attach_processes(gpus, apps)
    assert [p.pid for p in a.processes] == [8]
    assert [p.pid for p in b.processes] == [7]


def test_empty_output_gives_no_gpus() -> None:
    assert parse_query_gpu("") == ()
    assert parse_compute_apps("", QUERY_APPS_FIELDS) == ()
