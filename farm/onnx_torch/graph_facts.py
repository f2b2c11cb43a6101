"""What the interpreter reads off a whole model before its nodes: the opset its operators mean, and
the inputs of a type PyTorch holds without kernels for it."""

from __future__ import annotations

from typing import Any

from farm.models.opset import model_opset
from farm.onnx_torch.ops import UnsupportedOperator

# onnx.TensorProto UINT16, UINT32: held in the signed type above them, whose values are the same
# (torch has few kernels for its own unsigned types beyond uint8: no comparison, no addition)
_WIDER = {4: "int32", 12: "int64"}
_UINT64 = 13


def default_opset(model) -> int:
    """The opset the model's operators mean (the newest, where it imports none)."""
    from onnx import defs

    return model_opset(model) or defs.onnx_opset_version()


def widened_inputs(graph, input_names: list[str], torch: Any) -> list:
    """Per input, the torch dtype it is widened to on entry (None: as given); [] when none is.
    uint64 is refused: its values past 2**63 have no signed type to go to."""
    types = {i.name: i.type.tensor_type.elem_type for i in graph.input if i.type.HasField("tensor_type")}
    if any(types.get(name) == _UINT64 for name in input_names):
        raise UnsupportedOperator("uint64 inputs: PyTorch has no uint64 arithmetic, and values past 2**63 have "
                                  "no signed type to go to")
    widen = [getattr(torch, _WIDER[types[name]]) if types.get(name) in _WIDER else None for name in input_names]
    return widen if any(widen) else []
