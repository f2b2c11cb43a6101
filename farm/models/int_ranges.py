"""Values of a model's integer inputs, read from the graph where it says them.

An integer input that indexes an embedding table (`Gather` of a weight with the input as indices)
takes the table's row count: token ids in [0, vocabulary). One that is compared with a constant
(`Equal(sr, 16000)`, the branch a voice model takes on its sample rate) takes that constant. The
graph and its subgraphs (`If`/`Loop` bodies that read the input) are searched; the sweep file's
`inputs.NAME.range` or `.value` always wins. An input the graph says nothing clear about has no
hint, and planning asks for its values (farm.models).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

# Ops that pass an integer tensor on unchanged in value (only its shape or type changes): a hint
# found past them still holds for the input.
_VALUE_PRESERVING = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand"}


def integer_hints(model) -> dict[str, dict[str, Any]]:
    """{input name: {"range": [low, high], "why": "..."}} for the integer inputs whose values the
    graph tells; inputs it does not are absent."""
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
