"""The roofline: a cell's (or a layer's) FLOPs and bytes against its GPU's peaks.

Peaks are NVIDIA's datasheet figures for dense math (the "with sparsity" figures halved, never
used), per precision, and the memory bandwidth. A cell's precision picks its compute peak: fp32 the
FP32 (non-tensor-core) peak, tf32/fp16/bf16/fp8/int8 the tensor-core peak of that type. Where a
backend runs fp32 on TF32 tensor cores (TensorRT and ONNX Runtime's CUDA EP may), the % of the FP32
peak can pass 100 %: shown as it is. An int8 cell that keeps some layers in fp16 is set against the
INT8 peak, so its % of peak is a lower figure. A device not in the table (any CPU, a GPU not listed)
has no peak: its achieved figures are shown, never a percentage of an invented peak.

Sources (NVIDIA datasheets, fetched for this table):
  H100 SXM5 / PCIe / NVL: "NVIDIA H100 Tensor Core GPU" datasheet (nvidia.com/en-us/data-center/h100)
  H200 SXM / NVL: "NVIDIA H200 Tensor Core GPU" datasheet (nvidia.com/en-us/data-center/h200)
  A100 SXM4 / PCIe, 40 and 80 GB: "NVIDIA A100 Tensor Core GPU" datasheet (nvidia.com/en-us/data-center/a100)
  L4: "NVIDIA L4 Tensor Core GPU" datasheet; L40S: "NVIDIA L40S" datasheet; L40: "NVIDIA L40" datasheet
  A10: "NVIDIA A10 Tensor Core GPU" datasheet; T4: "NVIDIA T4 Tensor Core GPU" datasheet
  V100: "NVIDIA Tesla V100 GPU" datasheet
  RTX 4090: "NVIDIA Ada GPU Architecture" whitepaper, appendix table (FP16/BF16/FP8 with FP32 accumulate)
"""

from __future__ import annotations

import dataclasses
import re

PRECISION_ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}


@dataclasses.dataclass(frozen=True)
class Peak:
    """A GPU's dense peaks: TFLOP/s (TOP/s for int8) per precision, and memory bandwidth in GB/s."""

    name: str
    pattern: str  # matched (case-insensitive) against the device name NVML reports
    tflops: dict[str, float]
    bandwidth_gbps: float


def _peaks(fp32: float, tf32: float | None, half: float | None, fp8: float | None, int8: float | None,
           bf16: float | None = -1.0) -> dict[str, float]:
    figures = {"fp32": fp32, "tf32": tf32, "fp16": half, "bf16": half if bf16 == -1.0 else bf16, "fp8": fp8,
               "int8": int8}
    return {k: v for k, v in figures.items() if v is not None}


# Most specific patterns first: "H100 NVL" before "H100".
PEAKS: tuple[Peak, ...] = (
    Peak("H100 NVL", r"H100 NVL", _peaks(60, 417.5, 835.5, 1670.5, 1670.5), 3900),
    Peak("H100 PCIe", r"H100 PCIe", _peaks(51, 378, 756.5, 1513, 1513), 2000),
    Peak("H100 SXM5", r"H100", _peaks(67, 494.7, 989.4, 1978.9, 1978.9), 3350),
    Peak("H200 NVL", r"H200 NVL", _peaks(60, 417.5, 835.5, 1670.5, 1670.5), 4800),
    Peak("H200 SXM", r"H200", _peaks(67, 494.7, 989.4, 1978.9, 1978.9), 4800),
    Peak("A100 SXM4 80GB", r"A100[- ]SXM4?[- ]80GB", _peaks(19.5, 156, 312, None, 624), 2039),
    Peak("A100 PCIe 80GB", r"A100 80GB PCIe|A100[- ]PCIE[- ]80GB", _peaks(19.5, 156, 312, None, 624), 1935),
    Peak("A100 40GB", r"A100", _peaks(19.5, 156, 312, None, 624), 1555),
    Peak("L40S", r"L40S", _peaks(91.6, 183, 362.05, 733, 733), 864),
    Peak("L40", r"L40\b", _peaks(90.5, 90.5, 181.05, 362, 362), 864),
    Peak("L4", r"\bL4\b", _peaks(30.3, 60, 121, 242.5, 242.5), 300),
    Peak("A10", r"\bA10\b", _peaks(31.2, 62.5, 125, None, 250), 600),
    Peak("T4", r"\bT4\b", _peaks(8.1, None, 65, None, 130, bf16=None), 320),
    Peak("V100 PCIe", r"V100[- ]PCIE", _peaks(14, None, 112, None, None, bf16=None), 900),
    Peak("V100 SXM2", r"V100", _peaks(15.7, None, 125, None, None, bf16=None), 900),
    Peak("GeForce RTX 4090", r"RTX 4090", _peaks(82.6, 82.6, 165.2, 330.3, 660.6), 1008),
)


def device_peak(device_name: str | None, device_kind: str | None = None) -> Peak | None:
    """The table's row for a device name as NVML reports it ('NVIDIA H200', 'NVIDIA A100-SXM4-80GB'),
    or None: a CPU, no name, or a GPU not in the table."""
    if not device_name or (device_kind and device_kind != "cuda"):
        return None
    return next((p for p in PEAKS if re.search(p.pattern, device_name, re.IGNORECASE)), None)


@dataclasses.dataclass(frozen=True)
class Roofline:
    """Achieved figures of one cell or layer, and where they stand against the device's roofs."""

    achieved_tflops: float | None
    achieved_gbps: float | None
    intensity: float | None  # FLOPs per byte
    pct_peak_compute: float | None
    pct_peak_bandwidth: float | None
    bound: str | None  # "compute" or "memory": the roof the intensity puts it under; None without a peak
    peak_tflops: float | None
    peak_gbps: float | None


def roofline(flops: float | None, nbytes: float | None, time_ms: float | None, peak: Peak | None,
             precision: str | None) -> Roofline:
    """FLOPs and bytes done in `time_ms`, against `peak` at `precision`'s compute roof."""
    seconds = time_ms / 1e3 if time_ms is not None and time_ms > 0 else None
    tflops = flops / seconds / 1e12 if flops is not None and seconds else None
    gbps = nbytes / seconds / 1e9 if nbytes is not None and seconds else None
    intensity = flops / nbytes if flops is not None and nbytes else None
    peak_tflops = peak.tflops.get(precision or "") if peak else None
    peak_gbps = peak.bandwidth_gbps if peak else None
    bound = None
    if peak_tflops and peak_gbps and intensity is not None:
        ridge = peak_tflops * 1e12 / (peak_gbps * 1e9)  # FLOPs per byte where the two roofs meet
        bound = "compute" if intensity >= ridge else "memory"
    return Roofline(tflops, gbps, intensity,
                    100 * tflops / peak_tflops if tflops is not None and peak_tflops else None,
                    100 * gbps / peak_gbps if gbps is not None and peak_gbps else None,
                    bound, peak_tflops, peak_gbps)
