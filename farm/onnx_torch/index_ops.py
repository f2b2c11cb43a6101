"""Indexing and layout operators on the interpreter: scatters (a decoder's cache written in place,
`x[:, i] = y` in an export), GatherND, OneHot, Einsum, DepthToSpace/SpaceToDepth (super-resolution
heads, YOLO's reorg), EyeLike and Compress, each as ONNX's reference computes it. Indices may be
negative (counted from the end); a constant index stays a host value until it meets the device
(farm.onnx_torch.ops.tensor_like). An output whose size depends on a tensor's values is refused,
since reading the value back would stop a CUDA graph or torch.compile."""

from __future__ import annotations

import math

import numpy as np

from farm.onnx_torch.ops import UnsupportedOperator, from_the_end, lazy_torch, on_device, tensor_like

_REDUCTIONS = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}  # ONNX's -> torch's scatter_reduce


def _reduction(a, op: str) -> str | None:
    name = a.get("reduction", b"none")
    name = name.decode() if isinstance(name, bytes) else name
    if name != "none" and name not in _REDUCTIONS:
        raise UnsupportedOperator(f"{op} with reduction={name}")
    return _REDUCTIONS.get(name)


def _index(indices, like, size):
    """Indices as a long tensor on `like`'s device, negative ones counted from the end (`size`)."""
    return from_the_end(tensor_like(indices, like).long(), size)


def _scatter_elements(m, a, data, indices, updates):
    axis = a.get("axis", 0) % data.dim()
    index = _index(indices, data, data.shape[axis])
    updates = tensor_like(updates, data).to(data.dtype)
    reduce = _reduction(a, "ScatterElements")
    if reduce is None:
        return data.scatter(axis, index, updates)
    return data.scatter_reduce(axis, index, updates, reduce=reduce, include_self=True)


def _linear(index, shape):
    """[..., k] index tuples over the first k dims of `shape` as one offset each."""
    k = index.shape[-1]
    sizes = tensor_like(np.array(shape[:k], dtype=np.int64), index)  # device copies made once (CUDA graphs)
    strides = tensor_like(np.array([math.prod(shape[j + 1:k]) for j in range(k)], dtype=np.int64), index)
    return (from_the_end(index, sizes) * strides).sum(-1)


def _scatter_nd(m, a, data, indices, updates):
    index = tensor_like(indices, data).long()
    k = index.shape[-1]
    flat = data.reshape(math.prod(data.shape[:k]), *data.shape[k:]).clone()
    offsets = _linear(index, data.shape).reshape(-1)
    source = tensor_like(updates, data).to(data.dtype).reshape(offsets.numel(), *data.shape[k:])
    reduce = _reduction(a, "ScatterND")
    if reduce is None:
        flat[offsets] = source
    elif reduce == "sum":
        flat.index_add_(0, offsets, source)
    else:
        flat.index_reduce_(0, offsets, source, reduce, include_self=True)
    return flat.reshape(data.shape)


def _gather_nd(m, a, data, indices):
    torch = lazy_torch()
    data = tensor_like(data, indices if isinstance(indices, torch.Tensor) else None)
    index = tensor_like(indices, data).long()
    b, k = a.get("batch_dims", 0), index.shape[-1]
    batch = math.prod(data.shape[:b])
    rest = data.shape[b + k:]
    flat = data.reshape(batch, math.prod(data.shape[b:b + k]), *rest)
    offsets = _linear(index, data.shape[b:]).reshape(batch, -1)
    picked = flat[torch.arange(batch, device=data.device).unsqueeze(1), offsets]
    return picked.reshape(*data.shape[:b], *index.shape[b:-1], *rest)


def _one_hot(m, a, indices, depth, values):
    torch = lazy_torch()
    if isinstance(depth, torch.Tensor):
        raise UnsupportedOperator("OneHot with a depth computed at run time (an output of data-dependent size)")
    depth = int(np.asarray(depth).reshape(-1)[0])
    values = tensor_like(values, indices if isinstance(indices, torch.Tensor) else None)
    index = _index(indices, values, depth)
    hot = (index.unsqueeze(-1) == torch.arange(depth, device=index.device)) & (index >= 0).unsqueeze(-1)
    hot = torch.movedim(hot, -1, a.get("axis", -1) % hot.dim())
    return torch.where(hot, values[1], values[0])


def _einsum(m, a, *inputs):
    torch = lazy_torch()
    like = next((x for x in inputs if isinstance(x, torch.Tensor)), None)
    equation = a["equation"].decode() if isinstance(a["equation"], bytes) else a["equation"]
    return torch.einsum(equation.replace(" ", ""), *[tensor_like(x, like) for x in inputs])


def _depth_to_space(m, a, x):
    b, c, h, w = x.shape
    s = a["blocksize"]
    mode = a.get("mode", b"DCR")
    if mode in (b"CRD", "CRD"):
        return x.reshape(b, c // s ** 2, s, s, h, w).permute(0, 1, 4, 2, 5, 3).reshape(b, c // s ** 2, h * s, w * s)
    return x.reshape(b, s, s, c // s ** 2, h, w).permute(0, 3, 4, 1, 5, 2).reshape(b, c // s ** 2, h * s, w * s)


def _space_to_depth(m, a, x):
    b, c, h, w = x.shape
    s = a["blocksize"]
    order = (0, 1, 3, 5, 2, 4) if a.get("mode", b"DCR") in (b"CRD", "CRD") else (0, 3, 5, 1, 2, 4)
    return x.reshape(b, c, h // s, s, w // s, s).permute(*order).reshape(b, c * s * s, h // s, w // s)


def _eye_like(m, a, x):
    from farm.onnx_torch.ops import cast

    torch = lazy_torch()
    rows = torch.arange(x.shape[0], device=x.device).unsqueeze(1)
    eye = (torch.arange(x.shape[1], device=x.device).unsqueeze(0) - rows) == a.get("k", 0)
    return cast(m, {"to": a["dtype"]}, eye) if "dtype" in a else eye.to(x.dtype)


def _compress(m, a, x, condition):
    torch = lazy_torch()
    if isinstance(condition, torch.Tensor):
        raise UnsupportedOperator("Compress with a condition computed at run time (an output of data-dependent size)")
    keep = np.flatnonzero(np.asarray(condition).reshape(-1))
    axis = a.get("axis")
    source = x.reshape(-1) if axis is None else x
    axis = 0 if axis is None else axis % x.dim()
    keep = keep[keep < source.shape[axis]]
    return source.index_select(axis, tensor_like(keep, source).long())


# each on the device of its tensor inputs, or on the host where all are host values (a shape's arithmetic);
# OneHot's depth and Compress's condition must stay host values (they set the output's size)
INDEX_OPS = {"OneHot": _one_hot, "Compress": _compress} | {name: on_device(fn) for name, fn in {
    "ScatterElements": _scatter_elements,
    "Scatter": _scatter_elements,  # opsets 9-10: ScatterElements without reduction
    "ScatterND": _scatter_nd,
    "GatherND": _gather_nd,
    "Einsum": _einsum,
    "DepthToSpace": _depth_to_space,
    "SpaceToDepth": _space_to_depth,
    "EyeLike": _eye_like,
}.items()}
