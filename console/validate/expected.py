"""Published peak figures per GPU model, each with its public source, and the fraction
of each peak a healthy GPU is expected to reach in ``validate``'s own tests.

The figures are the vendor's datasheet peaks: dense BF16 Tensor Core TFLOPS (the
datasheets print the sparse figure, twice the dense one, with an asterisk), memory
bandwidth and the host link (PCIe, one direction). A measured figure is judged against
``FRACTION[figure] x peak``: below it -> warn, below half of it -> fail. The fractions are
what a plain torch matmul / copy reaches on a healthy GPU, not the peak itself.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuPeak:
    model: str
    matches: tuple[str, ...]  # lowercase words all found in torch's device name
    matmul_tflops: float  # dense BF16
    dev_mem_gbps: float
    host_link_gbps: float  # PCIe, one direction
    source: str


NVIDIA_H100 = "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100)"
NVIDIA_H200 = "NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200)"
NVIDIA_A100 = "NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100)"
NVIDIA_L40S = "NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s)"
NVIDIA_A10 = "NVIDIA A10 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/products/a10-gpu)"
NVIDIA_L4 = "NVIDIA L4 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/l4)"

# Order matters: the first entry whose words all appear in the device name wins.
PEAKS: tuple[GpuPeak, ...] = (
    GpuPeak("H200", ("h200",), 989.0, 4800.0, 64.0, NVIDIA_H200),
    GpuPeak("H100 NVL", ("h100", "nvl"), 835.0, 3900.0, 64.0, NVIDIA_H100),
    GpuPeak("H100 PCIe", ("h100", "pcie"), 756.0, 2000.0, 64.0, NVIDIA_H100),
    GpuPeak("H100 SXM", ("h100",), 989.0, 3350.0, 64.0, NVIDIA_H100),
    GpuPeak("A100 80GB PCIe", ("a100", "80gb", "pcie"), 312.0, 1935.0, 32.0, NVIDIA_A100),
    GpuPeak("A100 40GB PCIe", ("a100", "pcie"), 312.0, 1555.0, 32.0, NVIDIA_A100),
    GpuPeak("A100 80GB SXM", ("a100", "80gb"), 312.0, 2039.0, 32.0, NVIDIA_A100),
    GpuPeak("A100 40GB SXM", ("a100",), 312.0, 1555.0, 32.0, NVIDIA_A100),
    GpuPeak("L40S", ("l40s",), 362.0, 864.0, 32.0, NVIDIA_L40S),
    GpuPeak("A10", ("a10",), 125.0, 600.0, 32.0, NVIDIA_A10),
    GpuPeak("L4", ("l4",), 121.0, 300.0, 32.0, NVIDIA_L4),
)

# The share of each peak a healthy GPU reaches with validate's tests (torch.mm of 8192^2
# bf16, a 1 GiB device copy, 256 MiB pinned copies).
FRACTION: dict[str, float] = {"matmul_tflops": 0.6, "dev_mem_gbps": 0.7, "h2d_gbps": 0.6}
FRACTION["d2h_gbps"] = FRACTION["h2d_gbps"]


def peak_for(device_name: str) -> GpuPeak | None:
    """The table's entry for torch's device name ("NVIDIA H100 80GB HBM3"), or None."""
    words = device_name.lower().replace("-", " ")
    for peak in PEAKS:
        if all(_has_word(words, w) for w in peak.matches):
            return peak
    return None


def _has_word(name: str, word: str) -> bool:
    # "a10" must not match "a100": compare whole words (after "-" became " ").
    return word in name.split()


def peak_value(peak: GpuPeak, figure: str) -> float | None:
    if figure == "matmul_tflops":
        return peak.matmul_tflops
    if figure == "dev_mem_gbps":
        return peak.dev_mem_gbps
    if figure in ("h2d_gbps", "d2h_gbps"):
        return peak.host_link_gbps
    return None
