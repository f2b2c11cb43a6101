"""The values a model's seeded inputs take: floats in trtexec's U(-1, 1), strings of a few letters,
and integers read from the graph where it says them; the sweep file's `inputs.NAME` always wins.

An integer input that indexes an embedding table (`Gather` of a weight with the input as indices)
takes the table's row count: token ids in [0, vocabulary). One that is compared with a constant
(`Equal(sr, 16000)`, the branch a voice model takes on its sample rate) takes that constant. The
graph and its subgraphs (`If`/`Loop` bodies that read the input) are searched; the sweep file's
`inputs.NAME.range` or `.value` always wins. An input the graph says nothing clear about (or a
PyTorch source with no graph: its export failed) has no hint: planning gives it DEFAULT_INT_RANGE
and its model's cells say so (default_range_note), so that one model never stops a sweep.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from farm.config.keys import toml_key
from farm.errors import ConfigError

# What an integer input takes where neither the model nor the sweep file says: valid for any
# table of two rows or more (token ids 0 and 1).
DEFAULT_INT_RANGE = (0, 2)
FLOAT_RANGE = (-1.0, 1.0)  # trtexec fills inputs with U(-1, 1)
BOOL_RANGE = (0.0, 2.0)
# String inputs (ONNX tensor(string), numpy object): seeded lowercase ASCII words whose lengths
# lie in [low, high); a `value` is one length, a `range` the lengths
STRING_LENGTHS = (3.0, 9.0)
# Integer inputs that any model takes these values for: all-ones masks, token type 0. Others take what the
# graph or the sweep file says; where neither says, DEFAULT_INT_RANGE, noted on the model's cells.
KNOWN_INT_RANGES = {"attention_mask": (1.0, 2.0), "input_mask": (1.0, 2.0),
                    "token_type_ids": (0.0, 1.0), "segment_ids": (0.0, 1.0)}


def element_kind(dtype: str) -> str:
    """numpy's kind letter of an input's dtype name ('f', 'i', 'u', 'b', 'O'), the types numpy lacks
    included: ml_dtypes' bfloat16 and float8s are floats and its int4/uint4 integers, where numpy
    calls them all 'V' (raw bytes), and knows their names only once ml_dtypes is imported."""
    import ml_dtypes  # noqa: F401 - registers bfloat16, float8_* and int4 with numpy

    if dtype.startswith(("bfloat16", "float8_", "float4_")):
        return "f"
    if dtype in ("int4", "int2"):
        return "i"
    if dtype in ("uint4", "uint2"):
        return "u"
    return np.dtype(dtype).kind


# Ops that pass an integer tensor on unchanged in value (only its shape or type changes): a hint
# found past them still holds for the input.
_VALUE_PRESERVING = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand"}


# Integer operands an operator reads as the sizes, axes or positions of what it makes (Expand's
# shape, Slice's starts): no range of random values is right for them, so a graph input that feeds
# one needs its values from the user (op -> {input position: the operand's name})
SHAPE_OPERANDS = {"Expand": {1: "shape"}, "Reshape": {1: "shape"}, "Tile": {1: "repeats"}, "Split": {1: "split"},
                  "SplitToSequence": {1: "split"}, "Slice": {1: "starts", 2: "ends", 3: "axes", 4: "steps"},
                  "ConstantOfShape": {0: "shape"}, "Range": {0: "start", 1: "limit", 2: "delta"}, "TopK": {1: "k"},
                  "Pad": {1: "pads"}, "Resize": {2: "scales", 3: "sizes"}, "OneHot": {1: "depth"},
                  "Squeeze": {1: "axes"}, "Unsqueeze": {1: "axes"}, "CenterCropPad": {1: "shape"}}


def integer_hints(model) -> dict[str, dict[str, Any]]:
    """{input name: {"range": [low, high], "why": "..."}} for the integer inputs whose values the
    graph tells, or {"operand": "Expand's shape"} for one an operator reads as a shape (SHAPE_OPERANDS);
    inputs it says nothing of are absent."""
    from onnx import helper

    constants = _constants(model.graph)
    hints: dict[str, dict[str, Any]] = {}
    for value in model.graph.input:
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type") or value.name in constants:
            continue
        if np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type)).kind not in "iu":
            continue
        hint = _hint(model.graph, value.name, constants)
        if hint is not None:
            hints[value.name] = hint
    return hints


def _hint(graph, name: str, constants: dict[str, Any]) -> dict[str, Any] | None:
    names = {name}
    for node, position in _consumers(graph, names):
        if node.op_type in _VALUE_PRESERVING and position == 0:
            names.update(node.output)  # follow the value through
    for node, position in _consumers(graph, names):
        if node.op_type == "Gather" and position == 1 and node.input[0] in constants:
            dims = list(constants[node.input[0]].dims)
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            if -len(dims) <= axis < len(dims) and dims[axis] > 0:
                rows = int(dims[axis])
                return {"range": [0, rows], "why": f"indexes {node.input[0]!r} ({rows} rows) in {node.name or 'Gather'}"}
        if node.op_type == "Equal":
            other = node.input[1 - position] if position in (0, 1) else None
            if other in constants and int(np.prod(constants[other].dims)) == 1:
                from onnx import numpy_helper

                number = int(numpy_helper.to_array(constants[other]).reshape(-1)[0])
                return {"range": [number, number + 1], "why": f"compared with {number} in {node.name or 'Equal'}"}
    for node, position in _consumers(graph, names):
        operand = SHAPE_OPERANDS.get(node.op_type, {}).get(position)
        if operand:
            return {"operand": f"{node.op_type}'s {operand}"}
    return None


def _consumers(graph, names: set[str]) -> Iterator[tuple[Any, int]]:
    """(node, input position) of every node reading one of `names`, subgraphs included (a branch
    reads outer values by name)."""
    for node in graph.node:
        for position, used in enumerate(node.input):
            if used in names:
                yield node, position
        for attribute in node.attribute:
            for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                yield from _consumers(sub, names)


def _constants(graph) -> dict[str, Any]:
    """Initializers and Constant node values (TensorProtos, not decoded: a weight's shape is in its
    dims) of the graph and its subgraphs, by name."""
    found = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            value = next((a.t for a in node.attribute if a.name == "value" and a.HasField("t")), None)
            if value is not None:
                found[node.output[0]] = value
        for attribute in node.attribute:
            for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                found.update(_constants(sub))
    return found


def unread_reason(model_dtype: str, dtype: str, onnx_error: str | None) -> str:
    """Why the model does not tell an integer input's values (it has no hint), for the note."""
    if onnx_error:
        return "PyTorch could not export it to ONNX, so there is no graph to read it from"
    if dtype != model_dtype:
        return f"the sweep file makes it {dtype}, and the graph's {model_dtype} input is not read for it"
    return "the graph neither indexes a table with it nor compares it with a constant"


def operand_refusal(input_name: str, key: str, hint: dict | None, override: Any) -> str | None:
    """Why a model whose integer input is an operator's shape operand (`hint`'s "operand") cannot run
    on generated values, where the sweep file gives none for it (`override`: its inputs.NAME table):
    its cells are unsupported with this. None otherwise."""
    if not hint or "operand" not in hint or (override and (override.value is not None or override.range)):
        return None
    operand = hint["operand"]
    return (f"input {input_name!r} is {operand}: its values decide the shapes the model computes, and no "
            f"generated values are right for it; set inputs.{key}.value = V (one value for every element) if "
            "that is valid for it, or make it a constant of the graph")


def default_range_note(input_name: str, key: str, reason: str, scalar: bool = False) -> str:
    """What the cells of a model say of an integer input that took DEFAULT_INT_RANGE (`key`: its
    name as a TOML key)."""
    low, high = DEFAULT_INT_RANGE
    fix = f"inputs.{key}.value = V (or .range = [lo, hi])" if scalar else f"inputs.{key}.range = [lo, hi]"
    return (f"{input_name}: its range could not be read from the model ({reason}); using [{low}, {high}): "
            f"set {fix} to choose")


def input_values(input_name: str, model_dtype: str, dtype: str, shape: tuple[int | str, ...], override: Any,
                 zoo_ranges: dict[str, tuple[float, float]], where: str, hint: dict | None, onnx_error: str | None,
                 notes: list[str] | None) -> tuple[tuple[float, float], str | None]:
    """([low, high) of an input's seeded values, why no generated values fit it or None): `dtype` is
    the sweep file's (or the model's, `model_dtype`), `override` its inputs.NAME table, `hint` what
    the graph says of it (integer_hints); an integer input nothing tells takes DEFAULT_INT_RANGE,
    with a note appended to `notes`."""
    hint = hint if dtype == model_dtype else None
    refusal = operand_refusal(input_name, toml_key(input_name), hint, override)
    value_range = _value_range(input_name, dtype, shape, override, zoo_ranges, where, None if refusal else hint,
                               unread_reason(model_dtype, dtype, onnx_error), None if refusal else notes)
    return value_range, refusal


def _value_range(input_name: str, dtype: str, shape: tuple[int | str, ...], override: Any,
                 zoo_ranges: dict[str, tuple[float, float]], where: str,
                 hint: dict | None = None, unread: str = "", notes: list[str] | None = None) -> tuple[float, float]:
    """[low, high) of an input's random values (low == high: that one value). `hint`: what the
    graph says of an integer input (integer_hints), used where the sweep file says nothing;
    where nothing says, DEFAULT_INT_RANGE, and a note (why: `unread`) appended to `notes`."""
    kind = element_kind(dtype)
    key = f"{where}.inputs.{toml_key(input_name)}"
    if override is not None and override.value is not None:
        value = override.value
        if kind in "iub" and value != int(value):
            raise ConfigError(f"{key}.value: {value} is not an integer, and input {input_name!r} is {dtype}")
        if kind == "b" and value not in (0, 1):
            raise ConfigError(f"{key}.value: {value} is not a bool: input {input_name!r} takes 0 or 1")
        if kind in "iu" and not np.iinfo(dtype).min <= value <= np.iinfo(dtype).max:
            raise ConfigError(f"{key}.value: {value:g} does not fit the {dtype} of input {input_name!r}")
        return float(value), float(value)
    if override is not None and override.range is not None:
        low, high = override.range
        if kind in "iu":  # integers in [low, high): at least one, and within the dtype
            info = np.iinfo(dtype)
            if math.ceil(low) >= high:
                raise ConfigError(f"{key}.range: [{low:g}, {high:g}) holds no integer, and input {input_name!r} "
                                  f"is {dtype}: e.g. range = [{math.floor(low):d}, {math.floor(low) + 2:d}]")
            if low < info.min or high - 1 > info.max:
                raise ConfigError(f"{key}.range: [{low:g}, {high:g}) does not fit the {dtype} of input "
                                  f"{input_name!r} ({info.min} to {info.max})")
        return override.range
    if input_name in zoo_ranges:
        return zoo_ranges[input_name]
    if kind == "O":
        return STRING_LENGTHS
    if kind == "f":
        return FLOAT_RANGE
    if kind == "b":
        return BOOL_RANGE
    if input_name.lower() in KNOWN_INT_RANGES:
        return KNOWN_INT_RANGES[input_name.lower()]
    if hint is not None:
        low, high = hint["range"]
        return (float(low), float(low)) if high == low + 1 else (float(low), float(high))
    if notes is not None:
        notes.append(default_range_note(input_name, toml_key(input_name), unread, all(d == 1 for d in shape)))
    return float(DEFAULT_INT_RANGE[0]), float(DEFAULT_INT_RANGE[1])
