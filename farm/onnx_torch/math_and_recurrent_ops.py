"""Operators of the graphs users bring beyond CNNs: logic and comparisons, reductions, padding,
recurrent layers (LSTM, GRU through PyTorch's own cuDNN-backed kernels), TopK and
NonMaxSuppression, and the small elementwise ops exporters emit. Each is tested against ONNX
Runtime on a tiny model (tests/test_onnx_torch_ops.py). Host values (numpy: shape arithmetic)
stay on the host; a device value that shape arithmetic needs is read back once (`host`).
"""

from __future__ import annotations

import math

import numpy as np

from farm.onnx_torch.ops import UnsupportedOperator, binary, from_the_end, ints, lazy_torch, softmax_like, tensor_like, unary


def host(value) -> np.ndarray:
    """A value as numpy: a tensor (on any device) is copied to the host."""
    torch = lazy_torch()
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


_REMAINDER = binary(lambda u, v: u % v)
_FMOD = binary(lambda u, v: np.fmod(u, v) if isinstance(u, np.ndarray) else lazy_torch().fmod(u, v))


def _mod(m, a, x, y):
    """Mod: the remainder with the divisor's sign (Python's %) by default; with fmod=1 C's fmod,
    with the dividend's sign (ONNX requires it for floats)."""
    return (_FMOD if a.get("fmod", 0) else _REMAINDER)(m, a, x, y)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _where(m, a, cond, x, y):
    torch = lazy_torch()
    values = (cond, x, y)
    if not any(isinstance(v, torch.Tensor) for v in values):
        return np.where(np.asarray(cond), np.asarray(x), np.asarray(y))
    like = next(v for v in values if isinstance(v, torch.Tensor))
    cond, x, y = (tensor_like(v, like) for v in values)
    if x.dtype != y.dtype:  # a host scalar beside a tensor: the tensor's type
        x, y = (x, y.to(x.dtype)) if x.dim() >= y.dim() else (x.to(y.dtype), y)
    return torch.where(cond.bool(), x, y)


def _reduce(kind):
    """ReduceSum/Max/Min/Prod/L1/L2/Mean/SumSquare/LogSum/LogSumExp (axes an input from opset 13/18, or an attribute)."""
    def op(m, a, x, axes=None):
        torch = lazy_torch()
        axes = ints(axes) if axes is not None else a.get("axes")
        keep = bool(a.get("keepdims", 1))
        if axes is None or len(axes) == 0:
            if a.get("noop_with_empty_axes", 0):
                return x
            axes = list(range(x.dim() if isinstance(x, torch.Tensor) else np.ndim(x)))
        if not isinstance(x, torch.Tensor):
            array = np.asarray(x)
            fn = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod, "mean": np.mean,
                  "sumsquare": lambda v, **k: np.sum(np.square(v), **k),
                  "logsumexp": lambda v, **k: np.log(np.sum(np.exp(v), **k)),
                  "l1": lambda v, **k: np.sum(np.abs(v), **k), "l2": lambda v, **k: np.sqrt(np.sum(np.square(v), **k)),
                  "logsum": lambda v, **k: np.log(np.sum(v, **k))}[kind]
            return fn(array, axis=tuple(axes), keepdims=keep)
        dims = tuple(ax % x.dim() for ax in axes)
        if kind == "sum":
            return x.sum(dim=dims, keepdim=keep)
        if kind == "mean":
            return x.mean(dim=dims, keepdim=keep)
        if kind in ("l1", "l2", "logsum"):
            reduced = {"l1": x.abs(), "l2": x.square(), "logsum": x}[kind].sum(dim=dims, keepdim=keep)
            return {"l1": reduced, "l2": reduced.sqrt(), "logsum": reduced.log()}[kind]
        if kind == "sumsquare":
            return x.square().sum(dim=dims, keepdim=keep)
        if kind == "logsumexp":
            return torch.logsumexp(x, dim=dims, keepdim=keep)
        if kind == "prod":
            for dim in sorted(dims, reverse=True):
                x = x.prod(dim=dim, keepdim=keep)
            return x
        if any(x.shape[d] == 0 for d in dims):  # over nothing: ONNX's identity, where torch raises
            shape = [1 if d in dims else n for d, n in enumerate(x.shape) if keep or d not in dims]
            if x.is_floating_point():
                return x.new_full(shape, float("-inf") if kind == "max" else float("inf"))
            if x.dtype == torch.bool:
                return x.new_full(shape, kind != "max")
            info = torch.iinfo(x.dtype)
            return x.new_full(shape, info.min if kind == "max" else info.max)
        return x.amax(dim=dims, keepdim=keep) if kind == "max" else x.amin(dim=dims, keepdim=keep)
    return op


def _arg(kind):
    def op(m, a, x):
        axis, keep = a.get("axis", 0) % x.dim(), bool(a.get("keepdims", 1))
        last = a.get("select_last_index", 0)  # of equal values the last: the first of the flipped tensor
        y = x.flip(axis) if last else x
        index = (y.argmax if kind == "max" else y.argmin)(dim=axis, keepdim=keep)
        return x.shape[axis] - 1 - index if last else index
    return op


def _pad(m, a, x, pads=None, value=None, axes=None):
    F = lazy_torch().nn.functional
    pads = ints(pads) if pads is not None else a.get("pads", a.get("paddings"))  # before opset 11: attributes
    mode = _text(a.get("mode", "constant"))
    rank = x.dim()
    axes = [ax % rank for ax in ints(axes)] if axes is not None else list(range(rank))
    n = len(axes)
    begin, end = dict(zip(axes, pads[:n])), dict(zip(axes, pads[n:]))
    flat = []
    for axis in reversed(range(rank)):  # torch: last axis first
        flat += [begin.get(axis, 0), end.get(axis, 0)]
    while len(flat) > 2 and flat[-2:] == [0, 0]:
        flat = flat[:-2]
    fill = float(host(value).reshape(-1)[0]) if value is not None and np.size(host(value)) else float(a.get("value", 0.0))
    if mode == "constant":
        return F.pad(x, flat, value=fill)
    torch_mode = {"reflect": "reflect", "edge": "replicate", "wrap": "circular"}.get(mode)
    if torch_mode is None:
        raise UnsupportedOperator(f"Pad mode={mode}")
    return F.pad(x, flat, mode=torch_mode)


def _size(m, a, x):
    shape = x.shape if hasattr(x, "shape") else np.shape(x)
    return np.asarray(math.prod(shape), dtype=np.int64)


def _tile(m, a, x, repeats):
    if not isinstance(x, lazy_torch().Tensor):
        return np.tile(np.asarray(x), ints(repeats))
    return x.repeat(*ints(repeats))


def _top_k(m, a, x, k):
    """TopK. Of equal values ONNX takes the lower index first, which torch.topk does not promise:
    where the output is sorted, a stable sort gives ONNX's order."""
    count, axis, largest = ints(k)[0], a.get("axis", -1), bool(a.get("largest", 1))
    if not a.get("sorted", 1):
        values, indices = x.topk(count, dim=axis, largest=largest, sorted=False)
        return values, indices.long()
    values, indices = x.sort(dim=axis, descending=largest, stable=True)
    return values.narrow(axis, 0, count), indices.narrow(axis, 0, count).long()


def _cum_sum(m, a, x, axis):
    if a.get("exclusive", 0) or a.get("reverse", 0):
        raise UnsupportedOperator("CumSum with exclusive or reverse")
    return x.cumsum(dim=ints(axis)[0])


def _gather_elements(m, a, data, indices):
    axis = a.get("axis", 0)
    return data.gather(axis, from_the_end(tensor_like(indices, data), data.shape[axis]).long())


def _instance_norm(m, a, x, scale, bias):
    return lazy_torch().nn.functional.instance_norm(x, weight=scale, bias=bias, eps=a.get("epsilon", 1e-5))


def _prelu(m, a, x, slope):
    torch = lazy_torch()
    return torch.where(x >= 0, x, x * slope)


def _dropout(m, a, x, ratio=None, training=None):
    """Inference: the identity (a mask output, where the model reads it, is refused by _outputs).
    A training_mode the model computes or takes as an input (a tensor) is refused: it may be true."""
    if training is not None and (isinstance(training, lazy_torch().Tensor) or bool(np.asarray(training))):
        raise UnsupportedOperator("Dropout in training mode (training_mode true, or given at run time: a random "
                                  "mask each call)")
    return x


# --- recurrent layers: ONNX's gate order and weights, run by PyTorch's own kernels --------------

def _rnn_weights(m, kind: str, w, r, b, directions: int, hidden: int):
    """Per direction [w_ih, w_hh, b_ih, b_hh] in PyTorch's gate order, made once per weight tensor
    (cached on the module, keyed by the tensors' storage: moved or cast weights are made again)."""
    torch = lazy_torch()
    key = (kind, w.data_ptr(), r.data_ptr(), None if b is None else b.data_ptr(), w.dtype, str(w.device))
    cache = m.__dict__.setdefault("_rnn_weights", {})
    if key in cache:
        return cache[key]
    gates = 4 if kind == "lstm" else 3
    order = [0, 2, 3, 1] if kind == "lstm" else [1, 0, 2]  # ONNX i,o,f,c -> torch i,f,g,o; z,r,h -> r,z,n

    def reorder(t):
        return torch.cat([t.narrow(0, g * hidden, hidden) for g in order])

    params = []
    for d in range(directions):
        bias = b[d] if b is not None else torch.zeros(2 * gates * hidden, dtype=w.dtype, device=w.device)
        params += [reorder(w[d]), reorder(r[d]), reorder(bias[:gates * hidden]), reorder(bias[gates * hidden:])]
    cache[key] = params
    return params


def _check_rnn(kind: str, a, sequence_lens, x) -> None:
    defaults = {"lstm": [b"Sigmoid", b"Tanh", b"Tanh"], "gru": [b"Sigmoid", b"Tanh"]}[kind]
    acts = [s if isinstance(s, bytes) else str(s).encode() for s in a.get("activations", defaults)]
    if acts[:len(defaults)] != defaults or a.get("clip") is not None or a.get("input_forget", 0):
        raise UnsupportedOperator(f"{kind.upper()} with activations {acts}, clip or input_forget")
    if kind == "gru" and not a.get("linear_before_reset", 0):
        raise UnsupportedOperator("GRU with linear_before_reset=0 (PyTorch's GRU is linear_before_reset=1)")
    if sequence_lens is not None:
        lengths = set(ints(sequence_lens))
        if lengths != {x.shape[0]}:
            raise UnsupportedOperator(f"{kind.upper()} with sequence_lens shorter than the sequence")


def _rnn(kind: str):
    def op(m, a, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None):
        torch = lazy_torch()
        if p is not None:
            raise UnsupportedOperator("LSTM with peepholes")
        if a.get("layout", 0):  # ONNX Runtime has no batch-first recurrent layers to check one against
            raise UnsupportedOperator(f"{kind.upper()} with layout=1 (batch first)")
        _check_rnn(kind, a, sequence_lens, x)
        direction = _text(a.get("direction", "forward"))
        directions, reverse = (2 if direction == "bidirectional" else 1), direction == "reverse"
        hidden = a["hidden_size"]
        params = _rnn_weights(m, kind, w, r, b, directions, hidden)
        zeros = torch.zeros(directions, x.shape[1], hidden, dtype=x.dtype, device=x.device)
        h0 = initial_h if initial_h is not None else zeros
        if reverse:
            x = x.flip(0)
        if kind == "lstm":
            c0 = initial_c if initial_c is not None else zeros
            y, h, c = torch.lstm(x, (h0.contiguous(), c0.contiguous()), params, True, 1, 0.0, False,
                                 directions == 2, False)
        else:
            y, h = torch.gru(x, h0.contiguous(), params, True, 1, 0.0, False, directions == 2, False)
            c = None
        if reverse:
            y = y.flip(0)
        y = y.reshape(y.shape[0], y.shape[1], directions, hidden).permute(0, 2, 1, 3)  # [seq, dirs, batch, H]
        return (y, h, c) if kind == "lstm" else (y, h)
    return op


# --- detection: NonMaxSuppression ---------------------------------------------------------------

def _nms(m, a, boxes, scores, max_per_class=None, iou_threshold=None, score_threshold=None):
    """ONNX NonMaxSuppression: [selected, 3] (batch, class, box) in descending score per class,
    greedy, boxes as corners (y1, x1, y2, x2; either order) or centres (center_point_box=1)."""
    torch = lazy_torch()
    limit = ints(max_per_class)[0] if max_per_class is not None and np.size(host(max_per_class)) else 0
    iou_limit = float(host(iou_threshold).reshape(-1)[0]) if iou_threshold is not None else 0.0
    floor = float(host(score_threshold).reshape(-1)[0]) if score_threshold is not None else None
    if limit <= 0:
        return torch.zeros((0, 3), dtype=torch.int64, device=boxes.device)
    if a.get("center_point_box", 0):  # [x_center, y_center, width, height]
        cx, cy, w, h = boxes.unbind(-1)
        corners = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], dim=-1)
    else:
        first, second = boxes[..., :2], boxes[..., 2:]
        corners = torch.cat([torch.minimum(first, second), torch.maximum(first, second)], dim=-1)
    picked = []
    for batch in range(scores.shape[0]):
        for klass in range(scores.shape[1]):
            score = scores[batch, klass].float()
            candidates = torch.nonzero(score > floor).reshape(-1) if floor is not None else \
                torch.arange(score.shape[0], device=score.device)
            order = candidates[torch.argsort(score[candidates], descending=True, stable=True)]
            kept = _greedy(corners[batch].float()[order], iou_limit, limit)
            for index in order[kept].tolist():
                picked.append((batch, klass, index))
    return torch.tensor(picked, dtype=torch.int64, device=boxes.device).reshape(-1, 3)


def _greedy(boxes, iou_limit: float, limit: int):
    """Indices (into `boxes`, sorted by score) that greedy suppression keeps, at most `limit`."""
    torch = lazy_torch()
    area = (boxes[:, 2] - boxes[:, 0]).clamp(min=0) * (boxes[:, 3] - boxes[:, 1]).clamp(min=0)
    low = torch.maximum(boxes[:, None, :2], boxes[None, :, :2])
    high = torch.minimum(boxes[:, None, 2:], boxes[None, :, 2:])
    inter = (high - low).clamp(min=0).prod(-1)
    union = area[:, None] + area[None, :] - inter
    iou = torch.where(union > 0, inter / union.clamp(min=1e-12), torch.zeros_like(inter)).cpu()
    suppressed = np.zeros(len(boxes), dtype=bool)
    kept = []
    for i in range(len(boxes)):
        if suppressed[i]:
            continue
        kept.append(i)
        if len(kept) == limit:
            break
        suppressed |= (iou[i] > iou_limit).numpy()
    return torch.tensor(kept, dtype=torch.int64, device=boxes.device)


def _not(m, a, x):
    if not isinstance(x, lazy_torch().Tensor):
        return np.logical_not(np.asarray(x))
    return x.logical_not()


MATH_AND_RECURRENT_OPS = {
    "Not": _not,
    "And": binary(lambda x, y: x & y),
    "Or": binary(lambda x, y: x | y),
    "Xor": binary(lambda x, y: x ^ y),
    "Less": binary(lambda x, y: x < y),
    "LessOrEqual": binary(lambda x, y: x <= y),
    "Greater": binary(lambda x, y: x > y),
    "GreaterOrEqual": binary(lambda x, y: x >= y),
    "Mod": _mod,
    "Where": _where,
    "Neg": unary(lambda t, x: -x, np.negative),
    "Abs": unary(lambda t, x: x.abs(), np.abs),
    "Floor": unary(lambda t, x: x.floor(), np.floor),
    "Ceil": unary(lambda t, x: x.ceil(), np.ceil),
    "Round": unary(lambda t, x: x.round(), np.round),
    "Sign": unary(lambda t, x: x.sign(), np.sign),
    "Log": unary(lambda t, x: x.log()),
    "Reciprocal": unary(lambda t, x: x.reciprocal()),
    "Sin": unary(lambda t, x: x.sin()),
    "Cos": unary(lambda t, x: x.cos()),
    "Softplus": unary(lambda t, x: t.nn.functional.softplus(x)),
    "HardSwish": unary(lambda t, x: t.nn.functional.hardswish(x)),
    "Mish": unary(lambda t, x: t.nn.functional.mish(x)),
    "Elu": lambda m, a, x: lazy_torch().nn.functional.elu(x, a.get("alpha", 1.0)),
    "Selu": lambda m, a, x: a.get("gamma", 1.05070102214813232421875) * lazy_torch().where(
        x > 0, x, a.get("alpha", 1.67326319217681884765625) * lazy_torch().expm1(x)),
    "PRelu": _prelu,
    "Min": lambda m, a, *xs: _fold(xs, lambda x, y: lazy_torch().minimum(x, y), np.minimum),
    "Max": lambda m, a, *xs: _fold(xs, lambda x, y: lazy_torch().maximum(x, y), np.maximum),
    "Sum": lambda m, a, *xs: _fold(xs, lambda x, y: x + y, np.add),
    "Mean": lambda m, a, *xs: _fold(xs, lambda x, y: x + y, np.add) / len(xs),
    "ReduceSum": _reduce("sum"),
    "ReduceMax": _reduce("max"),
    "ReduceMin": _reduce("min"),
    "ReduceProd": _reduce("prod"),
    "ReduceL1": _reduce("l1"),
    "ReduceL2": _reduce("l2"),
    "ReduceLogSum": _reduce("logsum"),
    "ReduceSumSquare": _reduce("sumsquare"),
    "ReduceLogSumExp": _reduce("logsumexp"),
    "IsNaN": lambda m, a, x: np.isnan(np.asarray(x)) if not isinstance(x, lazy_torch().Tensor) else x.isnan(),
    "ArgMax": _arg("max"),
    "ArgMin": _arg("min"),
    "Pad": _pad,
    "Size": _size,
    "Tile": _tile,
    "TopK": _top_k,
    "CumSum": _cum_sum,
    "GatherElements": _gather_elements,
    "InstanceNormalization": _instance_norm,
    "LogSoftmax": softmax_like("log_softmax"),
    "Dropout": _dropout,
    "LSTM": _rnn("lstm"),
    "GRU": _rnn("gru"),
    "NonMaxSuppression": _nms,
}


def _fold(xs, torch_fn, numpy_fn):
    torch = lazy_torch()
    if not any(isinstance(x, torch.Tensor) for x in xs):
        result = np.asarray(xs[0])
        for x in xs[1:]:
            result = numpy_fn(result, np.asarray(x))
        return result
    like = next(x for x in xs if isinstance(x, torch.Tensor))
    values = [tensor_like(x, like) for x in xs]
    result = values[0]
    for x in values[1:]:
        result = torch_fn(result, x)
    return result
