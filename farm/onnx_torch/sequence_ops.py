"""ONNX's sequence operators (opset 11 on): a sequence is a Python list of tensors (or host
values) between nodes, as ONNX Runtime keeps a std::vector. Graphs that split a tensor into a
sequence, edit it and read elements back (the onnx wheel's `sequence_model*` tests) run node for
node; a sequence built inside a `Loop` still waits for that operator. Tested against ONNX Runtime
(tests/test_onnx_torch_ops.py). A graph input or output that is itself a sequence stays refused
(farm.onnx_torch._check_values): cells time and compare tensors."""

from __future__ import annotations

import numpy as np

from farm.onnx_torch.ops import UnsupportedOperator, ints, lazy_torch


def _position(position, length: int, inserting: bool = False) -> int:
    """ONNX's position (negative counts from the end; an insert may name the end itself)."""
    index = ints(position)[0]
    index = index + length if index < 0 else index
    if not 0 <= index <= length - (0 if inserting else 1):
        raise IndexError(f"sequence position {ints(position)[0]} is out of range for a sequence of {length}")
    return index


def _construct(m, a, *tensors):
    return list(tensors)


def _empty(m, a):
    return []


def _at(m, a, sequence, position):
    return sequence[_position(position, len(sequence))]


def _erase(m, a, sequence, position=None):
    if not sequence:
        raise IndexError("SequenceErase of an empty sequence")
    index = len(sequence) - 1 if position is None else _position(position, len(sequence))
    return sequence[:index] + sequence[index + 1:]


def _insert(m, a, sequence, tensor, position=None):
    index = len(sequence) if position is None else _position(position, len(sequence), inserting=True)
    return sequence[:index] + [tensor] + sequence[index:]


def _length(m, a, sequence):
    return np.array(len(sequence), dtype=np.int64)


def _split_to_sequence(m, a, x, split=None):
    torch = lazy_torch()
    axis = a.get("axis", 0)
    host = not isinstance(x, torch.Tensor)
    length = (np.shape(x) if host else x.shape)[axis]
    scalar = split is not None and (split.dim() if isinstance(split, torch.Tensor) else np.ndim(split)) == 0
    if scalar and ints(split)[0] == 1:
        split = None  # as ONNX Runtime (farm's reference) reads it: parts of one, keepdims applies
    if split is None:  # parts of one, the axis kept or dropped as keepdims says
        parts = [np.take(np.asarray(x), [i], axis=axis) if host else x.narrow(axis, i, 1) for i in range(length)]
        if not a.get("keepdims", 1):
            parts = [np.squeeze(p, axis=axis) if host else p.squeeze(axis) for p in parts]
        return parts
    sizes = ints(split)
    if scalar:  # one size: equal parts, the last shorter
        sizes = [min(sizes[0], length - start) for start in range(0, length, sizes[0])]
    if host:
        return list(np.split(np.asarray(x), np.cumsum(sizes)[:-1], axis=axis))
    return list(torch.split(x, sizes, dim=axis))


def _concat_from_sequence(m, a, sequence):
    torch = lazy_torch()
    if not sequence:
        raise UnsupportedOperator("ConcatFromSequence of an empty sequence")
    axis, new_axis = a["axis"], a.get("new_axis", 0)
    like = next((t for t in sequence if isinstance(t, torch.Tensor)), None)
    if like is None:  # host values stay on the host
        arrays = [np.asarray(t) for t in sequence]
        return np.stack(arrays, axis=axis) if new_axis else np.concatenate(arrays, axis=axis)
    tensors = [t if isinstance(t, torch.Tensor) else torch.as_tensor(np.asarray(t), device=like.device) for t in sequence]
    return torch.stack(tensors, dim=axis) if new_axis else torch.cat(tensors, dim=axis)


SEQUENCE_OPS = {
    "SequenceConstruct": _construct,
    "SequenceEmpty": _empty,
    "SequenceAt": _at,
    "SequenceErase": _erase,
    "SequenceInsert": _insert,
    "SequenceLength": _length,
    "SplitToSequence": _split_to_sequence,
    "ConcatFromSequence": _concat_from_sequence,
}
