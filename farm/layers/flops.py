"""FLOPs and bytes of every node of an ONNX graph at given input shapes (onnx only: no GPU stack).

Shapes come from onnx.shape_inference at the cell's input shapes. A node's FLOPs:
- Conv, ConvTranspose, MatMul (attention's batched products included), Gemm and their integer and
  QLinear forms: 2 x multiply-accumulates (farm.layers.memory's rule: each output element of a
  convolution costs C/G*R*S MACs, of a matrix product K MACs); bias adds are not counted;
- elementwise and normalisation ops: a fixed number of FLOPs per output element (`PER_ELEMENT`);
- pooling: one per window element per output element; reductions and global pools: one per input
  element;
- data movement (Reshape, Transpose, Concat, Gather, Cast, ...): none.
A node's bytes: its weights (initializer inputs) plus its other inputs and its outputs, each read
or written once (no fusion), so the sum over nodes is the traffic of an unfused run. Floating-point
tensors count at the cell's precision (`element_bytes`), the others at their own type's size.
A node with a dimension that inference cannot resolve has unknown FLOPs and bytes (None).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

PER_ELEMENT = {  # FLOPs per output element
    **dict.fromkeys(["Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "PRelu", "Max", "Min", "Sum", "Neg", "Abs",
                     "Sqrt", "Reciprocal", "Exp", "Log", "Pow", "Clip", "Where", "Equal", "Less", "Greater",
                     "Mean", "Floor", "Ceil", "Sign", "Not", "And", "Or"], 1),
    **dict.fromkeys(["Sigmoid", "Tanh", "Erf", "HardSigmoid", "HardSwish", "Elu", "Selu", "Softplus"], 4),
    "BatchNormalization": 2, "InstanceNormalization": 5, "LayerNormalization": 5, "Softmax": 3, "LogSoftmax": 3,
    "Gelu": 8, "QuantizeLinear": 2, "DequantizeLinear": 2,
}
POOLS = {"MaxPool", "AveragePool", "LpPool"}
REDUCTIONS = {"GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
              "ReduceProd", "ReduceL2", "ReduceSumSquare"}
CONVS = {"Conv", "ConvInteger", "QLinearConv"}
MATMULS = {"MatMul", "MatMulInteger", "QLinearMatMul"}
_FLOAT_TYPES = {1, 10, 11, 16}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
_WEIGHT_OF = {"QLinearConv": 3, "QLinearMatMul": 3}  # the weight input's index where it is not input 1


@dataclasses.dataclass(frozen=True)
class NodeCost:
    """One node's FLOPs and element counts (bytes follow from the precision: `bytes_at`)."""

    name: str
    op_type: str
    flops: int | None
    weight_float_elements: int | None
    activation_float_elements: int | None
    other_bytes: int | None  # integer tensors (shapes, indices, quantized weights), at their own size

    def bytes_at(self, element_bytes: float) -> int | None:
        """Weights + inputs + outputs in bytes, floating-point tensors at `element_bytes` each."""
        parts = (self.weight_float_elements, self.activation_float_elements, self.other_bytes)
        if any(p is None for p in parts):
            return None
        return int(math.ceil((parts[0] + parts[1]) * element_bytes + parts[2]))

    def weight_bytes_at(self, element_bytes: float) -> int | None:
        return None if self.weight_float_elements is None else int(self.weight_float_elements * element_bytes)


def light_model(model):
    """A copy of `model` whose large floating-point initializers keep their name, type and shape
    but not their data: what shape inference and the costs need, without hundreds of MiB of
    weights (small and integer ones, which shape computations read, are kept whole)."""
    import onnx

    light = onnx.ModelProto()
    light.ir_version, light.producer_name = model.ir_version, model.producer_name
    light.opset_import.extend(model.opset_import)
    graph = model.graph
    light.graph.name = graph.name
    for field in ("node", "input", "output", "value_info"):
        getattr(light.graph, field).extend(getattr(graph, field))
    for tensor in graph.initializer:
        if math.prod(tensor.dims) <= 64 or tensor.data_type not in _FLOAT_TYPES:
            light.graph.initializer.append(tensor)
        else:
            light.graph.initializer.append(onnx.TensorProto(name=tensor.name, data_type=tensor.data_type,
                                                            dims=tensor.dims))
    return light


def node_costs(model, input_shapes: dict[str, list[int]]) -> list[NodeCost]:
    """Every node's cost at `input_shapes` (input name: concrete shape; inputs left out keep the
    model's dimensions). `model` is an onnx.ModelProto; it is not changed."""
    from onnx import shape_inference

    light = light_model(model)
    initializers = {t.name for t in model.graph.initializer}
    for value in light.graph.input:
        if value.name in input_shapes and value.name not in initializers:
            dims = value.type.tensor_type.shape.dim
            for dim, size in zip(dims, input_shapes[value.name]):
                dim.Clear()
                dim.dim_value = int(size)
    inferred = shape_inference.infer_shapes(light, strict_mode=False, data_prop=True)
    known = {t.name: (list(t.dims), t.data_type) for t in model.graph.initializer}
    for value in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        if value.name not in known:
            known[value.name] = _shape_and_type(value)
    constants = {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    return [_cost(node, known, initializers | constants) for node in model.graph.node if node.op_type != "Constant"]


def _shape_and_type(value) -> tuple[list[int] | None, int]:
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return None, tensor.elem_type
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
    return dims, tensor.elem_type


def _cost(node, known: dict[str, tuple[Any, int]], weights: set[str]) -> NodeCost:
    from onnx import helper

    shapes = {name: known.get(name, (None, 0)) for name in [*node.input, *node.output] if name}
    if any(shape is None or any(d < 0 for d in shape) for shape, _ in shapes.values()):
        return NodeCost(node.name, node.op_type, None, None, None, None)
    weight_float = act_float = other = 0
    for name, (shape, elem_type) in shapes.items():
        count = math.prod(shape)
        if elem_type not in _FLOAT_TYPES:
            other += int(math.ceil(count * _own_bytes(elem_type, helper)))
        elif name in weights and name in node.input:
            weight_float += count
        else:
            act_float += count
    return NodeCost(node.name, node.op_type, _flops(node, shapes), weight_float, act_float, other)


def _own_bytes(elem_type: int, helper) -> float:
    try:
        return helper.tensor_dtype_to_np_dtype(elem_type).itemsize
    except (KeyError, TypeError, ValueError):
        return 1  # 4- and 8-bit types numpy has no dtype for: a byte, at most


def _flops(node, shapes: dict[str, tuple[list[int], int]]) -> int:
    op = node.op_type
    inputs = [shapes[name][0] if name else None for name in node.input]
    out = shapes[node.output[0]][0] if node.output and node.output[0] in shapes else None
    if op in CONVS:
        weight = inputs[_WEIGHT_OF.get(op, 1)]
        return 2 * math.prod(out) * math.prod(weight[1:])
    if op == "ConvTranspose":  # weight (C_in, C_out/G, k...): each input element feeds C_out/G * k outputs
        return 2 * math.prod(inputs[0]) * math.prod(inputs[1][1:])
    if op in MATMULS:
        a = inputs[0]
        return 2 * math.prod(out) * (a[-1] if a else 1)
    if op == "Gemm":
        trans_a = next((attr.i for attr in node.attribute if attr.name == "transA"), 0)
        return 2 * math.prod(out) * inputs[0][0 if trans_a else 1]
    if op in POOLS:
        kernel = next((list(attr.ints) for attr in node.attribute if attr.name == "kernel_shape"), [1])
        return math.prod(out) * math.prod(kernel)
    if op in REDUCTIONS:
        return math.prod(inputs[0])
    return math.prod(out) * PER_ELEMENT.get(op, 0) if out is not None else 0


def map_layer(name: str, nodes: dict[str, Any]) -> tuple[list[str], str]:
    """The ONNX node names a layer row stands for, and 'yes', 'partly' or 'no': a graph op's own
    name, or the parts of a TensorRT fused name (`Conv_0 + PWN(Clip_3)`, `A || B`), PWN(...) and
    profile suffixes undone. Reformatting and other layers TensorRT added map to none."""
    if name in nodes:
        return [name], "yes"
    key = re.sub(r" \[profile \d+\]$", "", name.strip())
    parts = [p.strip() for p in re.split(r" \+ | \|\| ", key) if p.strip()]
    parts = [re.sub(r"^(?:PWN\()+|\)+$", "", p) if p.startswith("PWN(") else p for p in parts]
    found = [p for p in parts if p in nodes]
    if not found:
        return [], "no"
    return found, "yes" if len(found) == len(parts) else "partly"
