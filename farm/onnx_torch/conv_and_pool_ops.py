"""Conv, MaxPool and AveragePool on the interpreter, with any pads ONNX allows: one side only, beyond
half the window, or `auto_pad` (SAME_UPPER, SAME_LOWER, VALID: models converted from TensorFlow),
which becomes explicit pads from the input's shape, known when the module runs (a CUDA graph or
torch.compile sees fixed shapes)."""

from __future__ import annotations

import math

from farm.onnx_torch.ops import UnsupportedOperator, lazy_torch


def explicit_pads(a, spatial: tuple[int, ...], kernel: list[int], strides: list[int], dilations: list[int]) -> list[int]:
    """The node's pads, [begin..., end...]: its `pads`, or what its `auto_pad` means for this input.
    SAME_*: an output of ceil(size / stride), the odd pixel at the end (UPPER) or the start (LOWER)."""
    mode = a.get("auto_pad", b"NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    n = len(spatial)
    if mode == "NOTSET":
        return list(a.get("pads", [0] * (2 * n)))
    if mode == "VALID":
        return [0] * (2 * n)
    if mode not in ("SAME_UPPER", "SAME_LOWER"):
        raise UnsupportedOperator(f"auto_pad={mode}")
    begin, end = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        total = max(0, (math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size)
        small, large = total // 2, total - total // 2
        begin.append(small if mode == "SAME_UPPER" else large)
        end.append(large if mode == "SAME_UPPER" else small)
    return begin + end


def _widths(pads: list[int], n: int) -> list[int]:
    """ONNX's [begin..., end...] pads as F.pad's widths, last axis first."""
    return [p for i in reversed(range(n)) for p in (pads[i], pads[i + n])]


def convolution(m, a, x, w, b=None):
    F = lazy_torch().nn.functional
    n = x.dim() - 2
    strides, dilations = a.get("strides", [1] * n), a.get("dilations", [1] * n)
    pads = explicit_pads(a, tuple(x.shape[2:]), list(w.shape[2:]), strides, dilations)
    if pads[:n] != pads[n:]:
        x = F.pad(x, _widths(pads, n))
        pads = [0] * (2 * n)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[n]
    return conv(x, w, b, stride=strides, padding=pads[:n], dilation=dilations, groups=a.get("group", 1))


def _pool(kind):
    name = "MaxPool" if kind == "max" else "AveragePool"

    def op(m, a, x):
        F = lazy_torch().nn.functional
        n = x.dim() - 2
        kernel, strides, dilations = a["kernel_shape"], a.get("strides", [1] * n), list(a.get("dilations", [1] * n))
        pads = explicit_pads(a, tuple(x.shape[2:]), kernel, strides, dilations)
        ceil, include_pad = bool(a.get("ceil_mode", 0)), bool(a.get("count_include_pad", 0))
        if kind == "avg" and dilations != [1] * n:
            raise UnsupportedOperator(f"{name} with dilations is not supported by the PyTorch backend (torch's "
                                      "avg_pool has none)")
        # torch pads both sides alike, and by at most half the kernel: other pads are explicit
        half = [k // 2 for k in kernel]
        divisor = None
        if pads[:n] != pads[n:] or any(p > h for p, h in zip(pads, half + half)):
            widths = _widths(pads, n)
            if kind == "avg" and not include_pad:  # the mean of the window's own elements: padding not counted
                divisor = F.pad(lazy_torch().ones_like(x[:1, :1]), widths)
            x = F.pad(x, widths, value=-math.inf if kind == "max" else 0.0)
            pads = [0] * (2 * n)
        if kind == "max":
            return {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[n](
                x, kernel, strides, pads[:n], dilation=dilations, ceil_mode=ceil)
        pool = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[n]
        y = pool(x, kernel, strides, pads[:n], ceil_mode=ceil, count_include_pad=include_pad)
        return y if divisor is None else y / pool(divisor, kernel, strides, 0, ceil_mode=ceil)
    return op


CONV_AND_POOL_OPS = {"Conv": convolution, "MaxPool": _pool("max"), "AveragePool": _pool("avg")}
