"""Parser for ``nvidia-smi -q -x`` (XML), across the DTD versions drivers have shipped.

Element names moved between drivers (``power_readings`` -> ``gpu_power_readings``,
``power_draw`` -> ``instant_power_draw``, ECC ``single_bit/total`` -> ``*_correctable``),
so each figure is looked up along a list of paths, first reported value wins.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from console.probe import values
from console.probe.models import GpuProcess, GpuSample

_POWER_DRAW = (
    "gpu_power_readings/power_draw",
    "gpu_power_readings/instant_power_draw",
    "gpu_power_readings/average_power_draw",
    "power_readings/power_draw",
)
_POWER_LIMIT = (
    "gpu_power_readings/current_power_limit",
    "power_readings/enforced_power_limit",
    "power_readings/power_limit",
)


def _first(gpu: ET.Element, paths: Sequence[str]) -> str | None:
    for path in paths:
        el = gpu.find(path)
        if el is not None and values.text(el.text) is not None:
            return el.text
    return None


def _sum(gpu: ET.Element, paths: Sequence[str]) -> int | None:
    """Sum of the reported counters among ``paths``; None when none is reported."""
    found = [values.integer(el.text) for p in paths if (el := gpu.find(p)) is not None]
    reported = [n for n in found if n is not None]
    return sum(reported) if reported else None


def _processes(gpu: ET.Element) -> tuple[GpuProcess, ...]:
    out = []
    for info in gpu.findall("processes/process_info"):
        pid = values.integer(info.findtext("pid"))
        if pid is None:
            continue
        out.append(
            GpuProcess(
                pid=pid,
                command=values.text(info.findtext("process_name")),
                used_memory_mib=values.number(info.findtext("used_memory")),
                type=values.text(info.findtext("type")),
            )
        )
    return tuple(out)


def _gpu(gpu: ET.Element, position: int) -> GpuSample:
    ecc_new_corr = ("ecc_errors/volatile/sram_correctable", "ecc_errors/volatile/dram_correctable")
    ecc_new_unc = (
        "ecc_errors/volatile/sram_uncorrectable",
        "ecc_errors/volatile/sram_uncorrectable_parity",
        "ecc_errors/volatile/sram_uncorrectable_secded",
        "ecc_errors/volatile/dram_uncorrectable",
    )
    corrected = _sum(gpu, ("ecc_errors/volatile/single_bit/total", *ecc_new_corr))
    uncorrected = _sum(gpu, ("ecc_errors/volatile/double_bit/total", *ecc_new_unc))
    return GpuSample(
        # Position in the file is nvidia-smi's index (minor_number is not, on Windows/MIG).
        index=position,
        uuid=values.text(gpu.findtext("uuid")),
        name=values.text(gpu.findtext("product_name")),
        utilization_gpu=values.number(gpu.findtext("utilization/gpu_util")),
        utilization_memory=values.number(gpu.findtext("utilization/memory_util")),
        memory_used_mib=values.number(gpu.findtext("fb_memory_usage/used")),
        memory_total_mib=values.number(gpu.findtext("fb_memory_usage/total")),
        temperature_c=values.number(gpu.findtext("temperature/gpu_temp")),
        power_draw_w=values.number(_first(gpu, _POWER_DRAW)),
        power_limit_w=values.number(_first(gpu, _POWER_LIMIT)),
        fan_percent=values.number(gpu.findtext("fan_speed")),
        pstate=values.text(gpu.findtext("performance_state")),
        clock_sm_mhz=values.number(gpu.findtext("clocks/sm_clock")),
        clock_mem_mhz=values.number(gpu.findtext("clocks/mem_clock")),
        ecc_corrected=corrected,
        ecc_uncorrected=uncorrected,
        mig_mode=values.text(gpu.findtext("mig_mode/current_mig")),
        processes=_processes(gpu),
    )


def parse_xml(document: str | bytes) -> tuple[GpuSample, ...]:
    """GPUs from one ``nvidia-smi -q -x`` document. Raises ValueError on broken XML."""
    try:
        root = ET.fromstring(document)
    except ET.ParseError as exc:
        raise ValueError(f"nvidia-smi XML does not parse: {exc}") from exc
    return tuple(_gpu(g, i) for i, g in enumerate(root.findall("gpu")))
