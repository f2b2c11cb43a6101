"""Inputs of the types numpy lacks: bfloat16 and the float8s, which farm makes as ml_dtypes arrays
(what onnx's own helpers give for them), as each engine takes them, and the 4-bit ones, which no
engine here is fed. ONNX Runtime's session.run cannot infer an ONNX type from such an array
("Numpy_type 256 can't be converted to MLDataType"): it takes an OrtValue typed by the element
type. PyTorch takes the same bytes viewed as its own bfloat16 or float8 tensor."""

from __future__ import annotations

from typing import Any

import numpy as np

# ml_dtypes holds these one to a byte; ONNX packs two (four for the 2-bit ones) to a byte
PACKED = frozenset({"int4", "uint4", "float4_e2m1fn", "int2", "uint2"})


def narrow(value: Any) -> bool:
    """Whether `value` is an array of a type numpy lacks (an ml_dtypes type)."""
    return isinstance(value, np.ndarray) and value.dtype.type.__module__.startswith("ml_dtypes")


def refusal(feeds: dict[str, Any], engine: str, device_note: str | None = None) -> str | None:
    """Why `engine` cannot be fed these inputs (a packed 4-bit input; `device_note`: why its device
    path cannot take any narrow type), or None."""
    for name, value in feeds.items():
        if narrow(value) and value.dtype.name in PACKED:
            return (f"input {name!r} is {value.dtype.name}, which ONNX packs several to a byte: farm makes no "
                    f"such inputs for {engine}; give the model a wider input type")
        if narrow(value) and device_note:
            return f"input {name!r} is {value.dtype.name}: {device_note}"
    return None


def ort_feeds(feeds: dict[str, Any]) -> dict[str, Any]:
    """`feeds` as ONNX Runtime's session.run takes them: a narrow array as an OrtValue of its ONNX type."""
    if not any(narrow(v) for v in feeds.values()):
        return feeds
    import onnxruntime as ort
    from onnx import helper

    return {name: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(_raw(value), helper.np_dtype_to_tensor_dtype(
                value.dtype)) if narrow(value) else value for name, value in feeds.items()}


def torch_tensor(value: np.ndarray):
    """`value` as a CPU tensor: a narrow array's bytes viewed as PyTorch's type of the same name."""
    import torch

    if not narrow(value):
        return torch.from_numpy(value)
    return torch.from_numpy(_raw(value)).view(getattr(torch, value.dtype.name))


def _raw(value: np.ndarray) -> np.ndarray:
    """A narrow array's bytes as unsigned integers of its element size (what both engines take)."""
    return np.ascontiguousarray(value).view(np.uint16 if value.dtype.itemsize == 2 else np.uint8)
