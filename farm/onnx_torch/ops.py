"""The interpreter's operators: fn(module, attrs, *inputs) -> output or tuple of outputs.

Shape arithmetic stays on the host as numpy/Python integers (see farm.onnx_torch).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from farm.errors import EngineUnsupported

# What a user can do about an operator the interpreter lacks: the cell's reason ends with it.
INTERPRETER_FIX = ("PyTorch runs an ONNX file through farm's interpreter (farm.onnx_torch), which lacks it; "
                   "give the model as a PyTorch source (module:PKG.MOD:FACTORY) to run its own nn.Module")


class UnsupportedOperator(EngineUnsupported):
    """An ONNX operator, or one of its attribute settings, the interpreter does not implement."""

    def __str__(self) -> str:
        return f"{super().__str__()}: {INTERPRETER_FIX}"


# --- operators: fn(module, attrs, *inputs) -> output or tuple of outputs -----------------------

def lazy_torch():
    import torch

    return torch


def ints(value) -> list[int]:
    """Shape-like values (Python, numpy or tensor) as a list of Python ints."""
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    if isinstance(value, np.ndarray):
        return [int(v) for v in value.reshape(-1)]
    return [int(v) for v in value.reshape(-1).tolist()]


_DEVICE_CONSTANTS: dict[tuple, object] = {}  # small host values already copied to a device
_MAX_CACHED = 4096  # elements


def tensor_like(value, like=None):
    """A tensor on `like`'s device: numpy constants become tensors where an op needs one. A small
    host value met again is the device copy made the first time (shape arithmetic gives the same
    values on every query): a warm-up fills the cache, so a CUDA graph captured after it holds no
    host-to-device copy, which capture forbids. Under torch.compile the value is a traced constant."""
    torch = lazy_torch()
    if isinstance(value, torch.Tensor):
        return value
    array = np.array(value)  # a writable copy: torch refuses to share read-only numpy memory
    # host float arithmetic runs in float32 (farm's Cast on the host) while the graph's floats are
    # one type, the module's: a float32 vector beside float16 tensors would promote them
    dtype = like.dtype if like is not None and array.dtype.kind == "f" and like.is_floating_point() else None
    device = like.device if like is not None else None
    if device is None or device.type == "cpu" or array.size > _MAX_CACHED or torch.compiler.is_compiling():
        return torch.as_tensor(array, device=device, dtype=dtype)
    key = (str(device), str(dtype), array.dtype.str, array.shape, array.tobytes())
    cached = _DEVICE_CONSTANTS.get(key)
    if cached is None:
        cached = _DEVICE_CONSTANTS[key] = torch.as_tensor(array, device=device, dtype=dtype)
    return cached


def unary(torch_fn, numpy_fn=None):
    """An elementwise operator; a host value (shape arithmetic) stays on the host: through `numpy_fn`,
    else through torch on the CPU and back (the 1/sqrt(head size) of an attention export)."""
    def op(m, a, x):
        torch = lazy_torch()
        if not isinstance(x, torch.Tensor):
            if numpy_fn is not None:
                return numpy_fn(np.asarray(x))
            return torch_fn(torch, torch.as_tensor(np.array(x))).numpy()
        return torch_fn(torch, x)
    return op


def on_device(fn):
    """The operator with its host inputs (small integer initializers and shape arithmetic stay host
    values, farm.onnx_torch) as tensors on the device of its first tensor input; with none, on the CPU
    and its result a host value again. Its signature is fn's (the generated call reads it)."""
    @functools.wraps(fn)
    def op(m, a, *inputs):
        torch = lazy_torch()
        like = next((v for v in inputs if isinstance(v, torch.Tensor)), None)
        moved = [v if v is None or isinstance(v, torch.Tensor) else tensor_like(v, like) for v in inputs]
        if like is not None:
            return fn(m, a, *moved)
        result = fn(m, a, *moved)
        return tuple(r.numpy() for r in result) if isinstance(result, tuple) else result.numpy()
    return op


def from_the_end(index, size):
    """ONNX's indices: a negative one counts from the end of an axis of `size` (a number, or a tensor
    of sizes, one per last-axis entry of `index`)."""
    return lazy_torch().where(index < 0, index + size, index)


def binary(fn):
    def op(m, a, x, y):
        torch = lazy_torch()
        if not isinstance(x, torch.Tensor) and not isinstance(y, torch.Tensor):
            return fn(np.asarray(x), np.asarray(y))  # shape arithmetic stays on the host
        like = x if isinstance(x, torch.Tensor) else y
        return fn(tensor_like(x, like), tensor_like(y, like))
    return op


def _divide(x, y):
    """Div: integers divide to an integer, truncated toward zero as ONNX Runtime does (shape arithmetic:
    (size - crop) / 2 is not half a pixel)."""
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "iu" and np.asarray(y).dtype.kind in "iu":
            return ((np.abs(x) // np.abs(y)) * np.sign(x) * np.sign(y)).astype(np.result_type(x, y))
        return x / y
    if not x.is_floating_point() and not y.is_floating_point():
        return lazy_torch().div(x, y, rounding_mode="trunc")
    return x / y


def _gemm(m, a, x, w, b=None):
    alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
    if a.get("transA", 0):
        x = x.transpose(0, 1)
    if alpha == 1.0 and a.get("transB", 0) and (b is None or (lazy_torch().is_tensor(b) and b.dim() == 1)):
        # one kernel, as nn.Linear: no multiplications by 1
        return lazy_torch().nn.functional.linear(x, w, b if b is None or beta == 1.0 else b * beta)
    if a.get("transB", 0):
        w = w.transpose(0, 1)
    y = x @ w if alpha == 1.0 else (x @ w) * alpha
    if b is not None:
        y = y + (b if beta == 1.0 else b * beta)
    return y


def _gather(m, a, data, indices):
    torch = lazy_torch()
    axis = a.get("axis", 0)
    if not isinstance(data, torch.Tensor) and not isinstance(indices, torch.Tensor):
        return np.take(np.asarray(data), np.asarray(indices), axis=axis)
    if not isinstance(data, torch.Tensor):  # host data, device indices: gather on the device
        data = tensor_like(data, indices)
    if not isinstance(indices, torch.Tensor):
        # Constant indices: slice on the device, so no host-to-device copy happens in the forward
        # pass (a copy is not allowed while a CUDA graph is being captured).
        flat = np.asarray(indices).reshape(-1)
        axis = axis % data.dim()
        picked = torch.cat([data.narrow(axis, int(i) % data.shape[axis], 1) for i in flat], dim=axis)
        return picked.reshape((*data.shape[:axis], *np.asarray(indices).shape, *data.shape[axis + 1:]))
    index = indices.long()
    index = from_the_end(index, data.shape[axis])
    if axis == 0 and data.dim() == 2 and index.dim() >= 1:
        return torch.nn.functional.embedding(index, data)
    axis = axis % data.dim()
    picked = data.index_select(axis, index.reshape(-1))
    return picked.reshape((*data.shape[:axis], *index.shape, *data.shape[axis + 1:]))  # () for a scalar


def _shape(m, a, x):
    dims = list(x.shape)
    start, end = a.get("start", 0), a.get("end", len(dims))
    return np.asarray(dims[start:end], dtype=np.int64)


def _slice(m, a, x, starts=None, ends=None, axes=None, steps=None):
    if starts is None:  # opset 1-9: starts, ends and axes are attributes
        starts, ends, axes = a["starts"], a["ends"], a.get("axes")
    starts, ends = ints(starts), ints(ends)
    axes = ints(axes) if axes is not None else list(range(len(starts)))
    steps = ints(steps) if steps is not None else [1] * len(starts)
    if any(st != 1 for st in steps):
        return sliced_with_steps(x, starts, ends, axes, steps)
    index = [slice(None)] * (x.ndim if hasattr(x, "ndim") else np.asarray(x).ndim)
    for s, e, ax, _st in zip(starts, ends, axes, steps):
        index[ax] = slice(s, e if e < 2**62 else None)
    return x[tuple(index)]


def sliced_with_steps(x, starts: list[int], ends: list[int], axes: list[int], steps_list: list[int]):
    """Slice with any steps (farm.onnx_torch.ops._slice takes steps of 1 itself): negative ones
    through a flip, since torch slices step forward only."""
    torch = lazy_torch()
    rank = x.dim() if isinstance(x, torch.Tensor) else np.ndim(x)
    axes = [ax % rank for ax in axes]
    if not isinstance(x, torch.Tensor):
        # the positions, worked out in Python, then taken: torch.compile traces numpy, and its
        # negative-step slicing gave an empty array (the pads that torch.onnx reverses for F.pad)
        array = np.asarray(x)
        for s, e, ax, st in zip(starts, ends, axes, steps_list):
            picked = range(array.shape[ax])[slice(s, None if abs(e) >= 2**62 else e, st)]
            array = np.take(array, list(picked), axis=ax)
        return array
    for s, e, ax, st in zip(starts, ends, axes, steps_list):
        length = x.shape[ax]
        picked = range(length)[slice(s, None if abs(e) >= 2**62 else e, st)]
        if st > 0:
            x = x.narrow(ax, picked.start, max(0, picked.stop - picked.start)) if len(picked) else x.narrow(ax, 0, 0)
            x = x[(slice(None),) * ax + (slice(None, None, st),)]
        else:  # walk backwards: flip the range it covers, then step forward
            if not len(picked):
                x = x.narrow(ax, 0, 0)
                continue
            low = picked[-1]
            x = x.narrow(ax, low, picked[0] - low + 1).flip(ax)[(slice(None),) * ax + (slice(None, None, -st),)]
    return x


def _reshape(m, a, x, shape):
    dims = ints(shape)
    if not a.get("allowzero", 0):
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return x.reshape(dims)


# ONNX's integer types as torch holds them: uint16 and uint32 in the next signed type up, whose
# values are the same (torch has few kernels for its own unsigned types beyond uint8)
_CAST_INTEGERS = {2: "uint8", 3: "int8", 4: "int32", 5: "int16", 6: "int32", 7: "int64", 9: "bool", 12: "int64"}


def cast(m, a, x):
    """Cast. Floats become the module's float type, double too (one float type meets another in no
    operator), rounded through fp16 or bf16 where the model casts to them; on the host, float32."""
    torch = lazy_torch()
    to = a["to"]
    if to not in _CAST_INTEGERS and to not in (1, 10, 11, 16):
        from onnx import TensorProto

        raise UnsupportedOperator(f"Cast to {TensorProto.DataType.Name(to)}: farm's interpreter has no such tensor type")
    if not isinstance(x, torch.Tensor):
        return np.asarray(x).astype(_CAST_INTEGERS.get(to, "float32"))  # host floats: float32 (tensor_like)
    if to in _CAST_INTEGERS:
        return x.to(getattr(torch, _CAST_INTEGERS[to]))
    narrow = {10: torch.float16, 16: torch.bfloat16}.get(to)
    if narrow is not None and m.float_dtype in (torch.float32, torch.float64) and x.dtype != narrow:
        x = x.to(narrow)  # rounded as the model asks, then held in the module's type like every float
    return x.to(m.float_dtype)


def _unsqueeze(m, a, x, axes=None):
    axes = ints(axes) if axes is not None else a["axes"]
    if not isinstance(x, lazy_torch().Tensor):
        return np.expand_dims(np.asarray(x), tuple(axes))  # a tuple: torch.compile traces numpy and takes no list
    rank = x.dim() + len(axes)
    for axis in sorted(ax % rank for ax in axes):
        x = x.unsqueeze(axis)
    return x


def _squeeze(m, a, x, axes=None):
    axes = ints(axes) if axes is not None else a.get("axes")
    if axes is None:
        return x.squeeze()
    if not isinstance(x, lazy_torch().Tensor):
        array = np.asarray(x)
        return array.squeeze(axis=tuple(ax % array.ndim for ax in axes))
    for axis in sorted((ax % x.dim() for ax in axes), reverse=True):
        x = x.squeeze(axis)
    return x


def _layer_norm(m, a, x, scale, bias=None):
    """LayerNormalization; its Mean and InvStdDev outputs (in fp32) where the node has them."""
    torch, axis, epsilon = lazy_torch(), a.get("axis", -1) % x.dim(), a.get("epsilon", 1e-5)
    y = torch.nn.functional.layer_norm(x, x.shape[axis:], scale, bias, epsilon)
    if a.get("_outputs", 1) == 1:
        return y
    var, mean = torch.var_mean(x.float(), dim=tuple(range(axis, x.dim())), keepdim=True, correction=0)
    return y, mean, (var + epsilon).rsqrt()


def _batch_norm(m, a, x, scale, bias, mean, var):
    return lazy_torch().nn.functional.batch_norm(x, mean, var, scale, bias, False, 0.0, a.get("epsilon", 1e-5))


def _flatten(m, a, x):
    axis = a.get("axis", 1)  # 0 to the rank (rank: [all, 1]); negative from the end
    axis += x.dim() if axis < 0 else 0
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def _concat(m, a, *xs):
    torch = lazy_torch()
    if not any(isinstance(x, torch.Tensor) for x in xs):
        return np.concatenate([np.atleast_1d(np.asarray(x)) for x in xs], axis=a["axis"])
    like = next(x for x in xs if isinstance(x, torch.Tensor))
    return torch.cat([tensor_like(x, like) for x in xs], dim=a["axis"])


def _clip(m, a, x, low=None, high=None):
    low = a.get("min") if low is None else low
    high = a.get("max") if high is None else high
    if low is None and high is None:  # no bounds: the identity
        return x
    return x.clamp(min=None if low is None else float(low), max=None if high is None else float(high))


def _reduce_mean(m, a, x, axes=None):
    axes = ints(axes) if axes is not None else a.get("axes")
    return x.mean(dim=axes, keepdim=bool(a.get("keepdims", 1)))


def _transpose(m, a, x):
    if not isinstance(x, lazy_torch().Tensor):  # a host value (shape arithmetic, a folded constant)
        return np.transpose(np.asarray(x), a.get("perm"))
    return x.permute(*a["perm"]) if "perm" in a else x.permute(*reversed(range(x.dim())))


# Operators whose meaning changed with the opset: their attributes carry the model's (`_opset`)
OPSET_SENSITIVE = frozenset({"Softmax", "LogSoftmax"})


def softmax_like(name: str):
    """Softmax and LogSoftmax: over `axis` (default -1) from opset 13; before it over the input
    flattened to 2-D at `axis` (default 1), [prod(dims[:axis]), prod(dims[axis:])], which differs
    wherever `axis` is not the last dimension (a segmentation map's classes at axis 1)."""
    def op(m, a, x):
        fn = getattr(lazy_torch(), name)
        if a.get("_opset", 13) >= 13:
            return fn(x, dim=a.get("axis", -1))
        axis = a.get("axis", 1) % max(x.dim(), 1)
        return fn(x.flatten(axis), dim=-1).reshape(x.shape)
    return op


def _constant(m, a):
    """Decoded once at build (farm.onnx_torch._fold_constants): a host array or a buffer's name."""
    return a["array"] if "array" in a else getattr(m, a["buffer"])


OPS: dict[str, Callable] = {
    "BatchNormalization": _batch_norm,
    "Relu": unary(lambda t, x: t.relu(x)),
    "Sigmoid": unary(lambda t, x: t.sigmoid(x)),
    "Tanh": unary(lambda t, x: t.tanh(x)),
    "Erf": unary(lambda t, x: t.erf(x)),
    "Sqrt": unary(lambda t, x: t.sqrt(x)),
    "Exp": unary(lambda t, x: t.exp(x)),
    "Gelu": lambda m, a, x: lazy_torch().nn.functional.gelu(
        x, approximate="tanh" if a.get("approximate") in (b"tanh", "tanh") else "none"),
    "LeakyRelu": lambda m, a, x: lazy_torch().nn.functional.leaky_relu(x, a.get("alpha", 0.01)),
    "HardSigmoid": lambda m, a, x: (x * a.get("alpha", 0.2) + a.get("beta", 0.5)).clamp(0, 1),
    "Clip": _clip,
    "GlobalAveragePool": lambda m, a, x: x.mean(dim=tuple(range(2, x.dim())), keepdim=True),
    "GlobalMaxPool": lambda m, a, x: x.amax(dim=tuple(range(2, x.dim())), keepdim=True),
    "Flatten": _flatten,
    "Gemm": _gemm,
    "MatMul": lambda m, a, x, y: x @ y,
    "Add": binary(lambda x, y: x + y),
    "Sub": binary(lambda x, y: x - y),
    "Mul": binary(lambda x, y: x * y),
    "Div": binary(_divide),
    "Pow": binary(lambda x, y: x ** y),
    "Softmax": softmax_like("softmax"),
    "Transpose": _transpose,
    "Reshape": _reshape,
    "Gather": _gather,
    "Shape": _shape,
    "Slice": _slice,
    "Cast": cast,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": _concat,
    "LayerNormalization": _layer_norm,
    "ReduceMean": _reduce_mean,
    "Identity": lambda m, a, x: x,
    "Constant": _constant,
}
