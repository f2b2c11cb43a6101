"""Per-layer memory and MACs by the rule of NVIDIA's engine explorer (trex).

A layer's footprint is its input bytes + weight bytes + output bytes. A tensor's bytes are the
product of its dimensions times its element size; weights are the kernel only (K*C*R*S/G
elements for a convolution), bias excluded. A dimension that is unknown (dynamic, printed by
TensorRT as a negative number) makes the size unknown: None, never a guess.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

# Element sizes keyed by the lower-cased type names that ONNX Runtime, ONNX, numpy and
# TensorRT print. Int4 packs two elements per byte.
ELEMENT_BYTES: dict[str, float] = {
    "float": 4, "float32": 4, "fp32": 4, "tensor(float)": 4,
    "double": 8, "float64": 8,
    "float16": 2, "half": 2, "fp16": 2,
    "bfloat16": 2, "bf16": 2,
    "fp8": 1, "float8": 1, "float8e4m3fn": 1, "float8e5m2": 1,
    "int64": 8, "uint64": 8, "int32": 4, "uint32": 4, "int16": 2, "uint16": 2,
    "int8": 1, "uint8": 1, "bool": 1, "int4": 0.5,
}


def element_bytes(dtype: str) -> float | None:
    """Bytes per element for a type name such as 'float', 'Int8' or 'Half' (None if unknown)."""
    key = dtype.strip().lower()
    if key in ELEMENT_BYTES:
        return ELEMENT_BYTES[key]
    first = re.split(r"[\s(/]", key, maxsplit=1)[0]  # "int8 nc/32hw32" -> "int8"
    return ELEMENT_BYTES.get(first)


def tensor_bytes(shape: Sequence[int] | None, dtype: str) -> int | None:
    """Bytes of a dense tensor, or None when a dimension or the type is unknown."""
    if shape is None:
        return None
    size = element_bytes(dtype)
    if size is None or any((not isinstance(d, int)) or d < 0 for d in shape):
        return None
    return int(math.ceil(math.prod(shape) * size))


def total_bytes(parts: Iterable[int | None]) -> int | None:
    """Sum that stays unknown (None) if any part is unknown."""
    total = 0
    for part in parts:
        if part is None:
            return None
        total += part
    return total


def conv_macs(output_shape: Sequence[int] | None, weight_shape: Sequence[int] | None) -> int | None:
    """Multiply-accumulates of a convolution: each output element costs C/G*R*S MACs.

    `weight_shape` is ONNX's (K, C/G, R, S...), so the grouping is already folded in.
    """
    if not output_shape or not weight_shape or any(d < 0 for d in [*output_shape, *weight_shape]):
        return None
    return math.prod(output_shape) * math.prod(weight_shape[1:])


def matmul_macs(output_shape: Sequence[int] | None, reduced_dim: int | None) -> int | None:
    """Multiply-accumulates of a matrix product: each output element costs K MACs."""
    if not output_shape or reduced_dim is None or reduced_dim < 0 or any(d < 0 for d in output_shape):
        return None
    return math.prod(output_shape) * reduced_dim


def format_bytes(value: float) -> str:
    """1.84 MiB, 792.00 KiB, 64 B: binary units, as the engine graph and the dashboard print sizes."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:.0f} B"
