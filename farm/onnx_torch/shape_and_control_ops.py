"""Operators of detection, OCR and audio graphs: ConvTranspose, Resize, Expand, Range, Split,
ConstantOfShape, Equal and If. Each is tested against ONNX Runtime on a tiny model
(tests/test_onnx_torch_ops.py). Host values (numpy) stay on the host, as in farm.onnx_torch.ops.
"""

from __future__ import annotations

import numpy as np

from farm.onnx_torch.math_and_recurrent_ops import host
from farm.onnx_torch.ops import UnsupportedOperator, binary, ints, lazy_torch, tensor_like


def _device(m):
    """The device the module's weights are on (CPU for a module without any)."""
    for buffer in m.buffers():
        return buffer.device
    return None


def _conv_transpose(m, a, x, w, b=None):
    F = lazy_torch().nn.functional
    n = x.dim() - 2
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") or "output_shape" in a:
        raise UnsupportedOperator("ConvTranspose with auto_pad or output_shape is not supported by the PyTorch backend")
    pads = a.get("pads", [0] * (2 * n))
    low = [min(pads[i], pads[i + n]) for i in range(n)]
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[n]
    y = fn(x, w, b, stride=a.get("strides", [1] * n), padding=low,
           output_padding=a.get("output_padding", [0] * n), groups=a.get("group", 1),
           dilation=a.get("dilations", [1] * n))
    extra = [(pads[i] - low[i], pads[i + n] - low[i]) for i in range(n)]
    if any(s or e for s, e in extra):  # asymmetric pads: crop what the symmetric part left
        y = y[(slice(None), slice(None)) + tuple(slice(s, y.shape[2 + i] - e) for i, (s, e) in enumerate(extra))]
    return y


_LINEAR = {1: "linear", 2: "bilinear", 3: "trilinear"}


def _resize(m, a, x, roi=None, scales=None, sizes=None):
    """Resize of the spatial axes. nearest by ONNX's own rule for every coordinate transform and
    rounding (source indices, then a gather); linear and cubic through torch's interpolate where it
    computes what ONNX does; what it does not is refused, never approximated."""
    F = lazy_torch().nn.functional
    mode = _text(a.get("mode", "nearest"))
    coords = _text(a.get("coordinate_transformation_mode", "half_pixel"))
    for key, plain in (("antialias", 0), ("exclude_outside", 0), ("keep_aspect_ratio_policy", "stretch")):
        if _text(a.get(key, plain)) != str(plain):
            raise UnsupportedOperator(f"Resize with {key}={_text(a[key])} is not supported by the PyTorch backend")
    out, scale = _resize_target(a, x, scales, sizes)
    n = x.dim() - 2
    if mode == "nearest":
        nearest = _text(a.get("nearest_mode", "round_prefer_floor"))
        # torch's own kernels where they compute ONNX's indices: floor(x / scale) and floor((x + 0.5) / scale),
        # with the scale given (scale_factor) or out / in (size)
        fast = {("asymmetric", "floor"): "nearest", ("half_pixel", "round_prefer_ceil"): "nearest-exact"}.get(
            (coords, nearest))
        if fast:
            given = sizes is None or not np.size(ints(sizes))
            return F.interpolate(x, size=None if given else out, scale_factor=scale if given else None, mode=fast)
        for axis in range(n):
            index = _nearest_source(x.shape[2 + axis], out[axis], scale[axis], coords, nearest)
            x = x.index_select(2 + axis, tensor_like(index, x))
        return x
    if mode in ("linear", "cubic") and (mode == "linear" or n == 2) and \
            coords in ("half_pixel", "pytorch_half_pixel", "align_corners"):
        if mode == "cubic" and a.get("cubic_coeff_a", -0.75) != -0.75:
            raise UnsupportedOperator("Resize cubic_coeff_a other than -0.75 is not supported by the PyTorch backend")
        if coords == "align_corners" and sizes is None and any(
                x.shape[2 + i] * scale[i] != out[i] for i in range(n)):  # ONNX maps by the unrounded length
            raise UnsupportedOperator("Resize align_corners with scales that give no whole output length is not "
                                      "supported by the PyTorch backend")
        if coords == "pytorch_half_pixel":  # an output of length 1 takes the first pixel, not the centre
            for axis in [i for i in range(n) if out[i] == 1]:
                x = x.narrow(2 + axis, 0, 1)
        kind = _LINEAR[n] if mode == "linear" else "bicubic"
        given = None if sizes is not None or coords == "pytorch_half_pixel" and 1 in out else scale
        return F.interpolate(x, size=None if given else out, scale_factor=given, mode=kind,
                             align_corners=coords == "align_corners")
    raise UnsupportedOperator(f"Resize mode={mode} coordinate_transformation_mode={coords} is not supported by "
                              f"the PyTorch backend")


def _resize_target(a, x, scales, sizes) -> tuple[list[int], list[float]]:
    """The spatial axes' output lengths and scales (sizes / input where sizes are given), with
    `axes` (opset 18) naming the axes the scales or sizes are for."""
    rank = x.dim()
    axes = [ax % rank for ax in a.get("axes", range(rank))]
    full_sizes, full_scales = list(x.shape), [1.0] * rank
    if sizes is not None and np.size(ints(sizes)):
        for axis, size in zip(axes, ints(sizes)):
            full_sizes[axis], full_scales[axis] = size, size / x.shape[axis]
    elif scales is not None and _floats(scales):
        for axis, value in zip(axes, _floats(scales)):
            full_scales[axis], full_sizes[axis] = value, int(np.floor(x.shape[axis] * value))
    if full_sizes[:2] != list(x.shape[:2]):
        raise UnsupportedOperator("Resize of the batch or channel axis is not supported by the PyTorch backend")
    return full_sizes[2:], full_scales[2:]


def _nearest_source(length: int, out: int, scale: float, coords: str, nearest: str) -> np.ndarray:
    """ONNX's source index of each output position of one axis in nearest mode."""
    x = np.arange(out, dtype=np.float64)
    if coords == "half_pixel" or (coords == "pytorch_half_pixel" and out > 1):
        source = (x + 0.5) / scale - 0.5
    elif coords == "pytorch_half_pixel":
        source = np.zeros(out)
    elif coords == "align_corners":
        source = x * (length - 1) / (out - 1) if out > 1 else np.zeros(out)
    elif coords == "asymmetric":
        source = x / scale
    else:
        raise UnsupportedOperator(f"Resize nearest with coordinate_transformation_mode={coords} is not supported "
                                  "by the PyTorch backend")
    rounding = {"round_prefer_floor": lambda v: np.ceil(v - 0.5), "round_prefer_ceil": lambda v: np.floor(v + 0.5),
                "floor": np.floor, "ceil": np.ceil}
    if nearest not in rounding:
        raise UnsupportedOperator(f"Resize nearest_mode={nearest} is not supported by the PyTorch backend")
    return np.clip(rounding[nearest](source), 0, length - 1).astype(np.int64)


def _floats(value) -> list[float]:
    """Scales as Python floats, wherever they are (a device tensor is read back)."""
    if isinstance(value, (list, tuple)):  # a literal: no numpy, which torch.compile would trace
        return [float(v) for v in value]
    if isinstance(value, lazy_torch().Tensor):
        return [float(v) for v in value.reshape(-1).tolist()]
    return [float(v) for v in np.asarray(value).reshape(-1)]


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _expand(m, a, x, shape):
    dims = ints(shape)
    if not isinstance(x, lazy_torch().Tensor):
        array = np.asarray(x)
        return np.broadcast_to(array, np.broadcast_shapes(array.shape, tuple(dims))).copy()
    return x.expand(np.broadcast_shapes(tuple(x.shape), tuple(dims)))


def _range(m, a, start, limit, delta):
    torch = lazy_torch()
    if not any(isinstance(v, torch.Tensor) for v in (start, limit, delta)):
        # constants may come as Python floats (farm.onnx_torch.HOST_FLOAT_ARGUMENTS): the type is
        # the first numpy argument's, float32 (the model's float) when all three are literals
        typed = [v for v in (start, limit, delta) if isinstance(v, (np.ndarray, np.generic))]
        dtype = typed[0].dtype if typed else np.float32
        return np.arange(*(np.asarray(v).item() for v in (start, limit, delta)), dtype=dtype)
    like = next(v for v in (start, limit, delta) if isinstance(v, torch.Tensor))
    values = [v.item() if isinstance(v, torch.Tensor) else np.asarray(v).item() for v in (start, limit, delta)]
    return torch.arange(*values, dtype=like.dtype, device=like.device)


def _split(m, a, x, split=None):
    axis = a.get("axis", 0)
    sizes = ints(split) if split is not None else a.get("split")
    count = a["_outputs"]
    torch = lazy_torch()
    length = (x.shape if isinstance(x, torch.Tensor) else np.asarray(x).shape)[axis]
    if sizes is None:  # equal parts, the last one smaller (opset 18's num_outputs rule)
        part = -(-length // count)
        sizes = [min(part, length - i * part) for i in range(count)]
    if not isinstance(x, torch.Tensor):
        return tuple(np.split(np.asarray(x), np.cumsum(sizes)[:-1], axis=axis))
    return tuple(torch.split(x, list(sizes), dim=axis))


def _constant_of_shape(m, a, shape):
    dims = ints(shape)
    value = np.asarray(a["value"]).reshape(-1) if "value" in a else np.zeros(1, np.float32)
    if value.dtype.kind in "iub":  # integer and boolean fills stay host values (shape arithmetic)
        return np.full(dims, value[0], dtype=value.dtype)
    return lazy_torch().full(dims, float(value[0]), dtype=m.float_dtype, device=_device(m))


def _if(m, a, cond, *outer):
    """Runs the branch `cond` picks (a host value; a device one is read back, which torch.compile
    cannot trace). Each branch is interpreted with the outer values it reads (a["_free"])."""
    torch = lazy_torch()
    taken = bool(cond.item() if isinstance(cond, torch.Tensor) else np.asarray(cond).reshape(-1)[0])
    outputs = _run_branch(m, a["_then"] if taken else a["_else"], dict(zip(a["_free"], outer)))
    return outputs if len(outputs) > 1 else outputs[0]


def _run_branch(m, branch: dict, env: dict) -> tuple:
    """A subgraph's outputs (an If branch, a Scan body), its nodes interpreted over `env`."""
    from farm.onnx_torch.ops import OPS

    env = {**env, **branch["constants"]}
    env.update({name: getattr(m, attr) for name, attr in branch.get("buffers", {}).items()})
    for _, op, ins, outs, attrs in branch["nodes"]:
        result = OPS[op](m, attrs, *[env[i] if i else None for i in ins])
        env.update(zip(outs, result if isinstance(result, tuple) else (result,)))
    return tuple(env[o] for o in branch["outputs"])


def _scan(m, a, *args):
    """ONNX Scan: the body run once per slice of the scan inputs (along their axes, either
    direction), its state carried from one step to the next; the final states, then each scan
    output stacked along its axis. Steps run one after another on the host's loop (as ONNX Runtime's
    CPU kernel does): a scikit-learn nearest-neighbours graph scans the training rows."""
    torch = lazy_torch()
    outer = dict(zip(a["_free"], args[len(args) - len(a["_free"]):]))
    own = args[:len(args) - len(a["_free"])]
    scans = a["num_scan_inputs"]
    states, inputs = list(own[:len(own) - scans]), own[len(own) - scans:]
    axes = list(a.get("scan_input_axes") or [0] * scans)
    backwards = list(a.get("scan_input_directions") or [0] * scans)

    def pick(x, axis: int, index: int):
        if isinstance(x, torch.Tensor):
            return x.select(axis % x.dim(), index)
        return np.take(np.asarray(x), index, axis=axis)

    first = inputs[0]
    steps = (first.shape if isinstance(first, torch.Tensor) else np.shape(first))[axes[0]]
    names = a["_body_inputs"]
    produced: list[list] = []
    for step in range(steps):
        env = dict(outer)
        env.update(zip(names[:len(states)], states))
        env.update((name, pick(x, axes[j], steps - 1 - step if backwards[j] else step))
                   for j, (name, x) in enumerate(zip(names[len(states):], inputs)))
        results = _run_branch(m, a["_body"], env)
        states = list(results[:len(states)])
        produced.append(list(results[len(states):]))
    out_axes = list(a.get("scan_output_axes") or [0] * len(produced[0] if produced else []))
    out_backwards = list(a.get("scan_output_directions") or [0] * len(out_axes))
    stacked = []
    for k, axis in enumerate(out_axes):
        values = [step[k] for step in produced][::-1 if out_backwards[k] else 1]
        if any(isinstance(v, torch.Tensor) for v in values):
            like = next(v for v in values if isinstance(v, torch.Tensor))
            values = [v if isinstance(v, torch.Tensor) else torch.as_tensor(np.asarray(v), device=like.device)
                      for v in values]
            stacked.append(torch.stack(values, dim=axis % (values[0].dim() + 1)))
        else:
            stacked.append(np.stack([np.asarray(v) for v in values], axis=axis))
    result = tuple(states) + tuple(stacked)
    return result if len(result) > 1 else result[0]


def _cast_like(m, a, x, like):
    """CastLike: `x` in `like`'s type (a float in the module's float type, as Cast makes every float)."""
    torch = lazy_torch()
    if not isinstance(like, torch.Tensor):
        return host(x).astype(np.asarray(like).dtype)
    x = x if isinstance(x, torch.Tensor) else tensor_like(x, like)
    return x.to(m.float_dtype if like.is_floating_point() else like.dtype)


def _trilu(m, a, x, k=None):
    """Trilu: the upper (default) or lower triangle of the last two axes, from diagonal k."""
    diagonal = ints(k)[0] if k is not None else 0
    upper = bool(a.get("upper", 1))
    if not isinstance(x, lazy_torch().Tensor):
        return (np.triu if upper else np.tril)(np.asarray(x), diagonal)
    return x.triu(diagonal) if upper else x.tril(diagonal)


def _grid_sample(m, a, x, grid):
    """GridSample: torch's grid_sample, whose semantics ONNX's follow (opset 20 renamed the modes
    linear and cubic); cubic on a volume, which torch lacks, is refused."""
    given = _text(a.get("mode", "bilinear"))
    mode = {"linear": "bilinear", "cubic": "bicubic"}.get(given, given)
    if mode == "bicubic" and x.dim() == 5:
        raise UnsupportedOperator("GridSample cubic on a volume (5-D) is not supported by the PyTorch backend")
    return lazy_torch().nn.functional.grid_sample(x, grid.to(x.dtype), mode=mode, padding_mode=_text(
        a.get("padding_mode", "zeros")), align_corners=bool(a.get("align_corners", 0)))


def _rms_normalization(m, a, x, scale):
    """RMSNormalization (opset 23): x / sqrt(mean(x², over axis and after) + epsilon) × scale, the mean in fp32."""
    torch, axis = lazy_torch(), a.get("axis", -1) % x.dim()
    wide = x.float()
    rms = wide.square().mean(dim=tuple(range(axis, x.dim())), keepdim=True).add(a.get("epsilon", 1e-5)).rsqrt()
    return (wide * rms).to(x.dtype) * (scale.to(x.dtype) if isinstance(scale, torch.Tensor) else scale)


SHAPE_AND_CONTROL_OPS = {
    "CastLike": _cast_like,
    "GridSample": _grid_sample,
    "RMSNormalization": _rms_normalization,
    "Trilu": _trilu,
    "ConvTranspose": _conv_transpose,
    "Resize": _resize,
    "Expand": _expand,
    "Range": _range,
    "Split": _split,
    "ConstantOfShape": _constant_of_shape,
    "Equal": binary(lambda x, y: x == y),
    "If": _if,
    "Scan": _scan,
}
