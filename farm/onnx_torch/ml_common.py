"""What the ai.onnx.ml operators share (farm.onnx_torch.ml_ops, ml_trees): a node's prepared
attributes as tensors on the query's device, inputs as float rows, ONNX-ML's post transforms."""

from __future__ import annotations

import math

import numpy as np

from farm.errors import EngineUnsupported
from farm.onnx_torch.ops import UnsupportedOperator, lazy_torch

TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")


def arrays(a: dict, like) -> dict:
    """The node's prepared values, numpy arrays as tensors on `like`'s device (floats in its dtype),
    made once per device and dtype."""
    torch = lazy_torch()
    state = a["_state"]
    key = (str(like.device), str(like.dtype))
    if key not in state["device"]:
        state["device"][key] = {
            k: torch.as_tensor(v, device=like.device,
                               dtype=like.dtype if v.dtype.kind == "f" and like.is_floating_point() else None)
            if isinstance(v, np.ndarray) else v for k, v in state["prepared"].items()}
    return state["device"][key]


def floats(x):
    """X as a float tensor (an integer or host input converted, as ONNX Runtime's kernels cast it)."""
    torch = lazy_torch()
    x = x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    return x if x.is_floating_point() else x.float()


def rows(x):
    """X as [N, F]: a 1-D input is one row, as ONNX Runtime takes it."""
    return x.reshape(1, -1) if x.dim() == 1 else x


def post_transform(scores, how: str):
    """ONNX-ML's post_transform of [N, C] scores (C > 1, or a regressor's targets)."""
    torch = lazy_torch()
    if how == "NONE":
        return scores
    if how == "LOGISTIC":
        return torch.sigmoid(scores)
    if how == "SOFTMAX":
        return torch.softmax(scores, dim=-1)
    if how == "SOFTMAX_ZERO":  # zeros stay out of the sum (scaled by exp(-max) as ONNX Runtime does)
        peak = scores.amax(dim=-1, keepdim=True)
        zero = scores.abs() <= 1e-7
        values = torch.where(zero, scores * torch.exp(-peak), torch.exp(scores - peak))
        total = torch.where(zero, torch.zeros_like(values), values).sum(dim=-1, keepdim=True)
        return values / total
    if how == "PROBIT":
        return math.sqrt(2) * torch.erfinv(2 * scores - 1)
    raise UnsupportedOperator(f"post_transform {how!r} is not one of {', '.join(TRANSFORMS)}")


def class_labels(attrs: dict, what: str) -> np.ndarray:
    """A classifier's integer class labels; EngineUnsupported for string ones (torch has no strings)."""
    if attrs.get("classlabels_strings"):
        raise EngineUnsupported(f"{what} with string class labels: the PyTorch backend has no strings; run the "
                                "model on onnxruntime, or convert it with integer labels")
    return np.asarray(attrs.get("classlabels_ints") or attrs.get("classlabels_int64s") or [], dtype=np.int64)


def text(value) -> str:
    """An attribute's string (ONNX gives bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


