"""Run an ONNX graph as a torch.nn.Module, so PyTorch runs the same weights as every other backend.

Why not onnx2torch: it imports torchvision at import time, and the torchvision wheels that
match the torch builds available to this project do not import beside them; it also renames
nodes into a module tree, while farm joins per-layer rows across backends by ONNX node name.
This interpreter covers the operators of the zoo models, CNN/transformer graphs, detection, OCR,
control flow, quantized files, ai.onnx.ml's classical models and sequences (a module each); an
operator it lacks makes the cell `unsupported` with the operator's name (UnsupportedOperator).

Everything that does not depend on the inputs is done once, at build: initializers and Constant
nodes are decoded into buffers (floating point, moved and cast with the module) or host numpy
values (small integers), and the graph becomes generated straight-line Python (one line per node,
attributes as literals), so a query runs no loop over nodes and no dictionary lookups by name,
and torch.compile traces code with few guards (tests/test_torch_backend.py counts them).
While profiling (`annotate`, `record`) the module interprets node by node instead.

Shape arithmetic (Shape, and small integer constants feeding Reshape/Slice/Unsqueeze...) is
kept as Python integers, and small float constants that operators read as numbers (Clip's
bounds, Resize's scales, Range's arguments) as Python floats, so the module traces cleanly under
torch.compile and CUDA graphs: nothing reads a tensor back from the GPU in the forward pass.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable
from typing import Any

import numpy as np

from farm.onnx_torch.attention_ops import ATTENTION_OPS
from farm.onnx_torch.conv_and_pool_ops import CONV_AND_POOL_OPS
from farm.onnx_torch.elementwise_ops import ELEMENTWISE_OPS
from farm.onnx_torch.graph_facts import default_opset, widened_inputs
from farm.onnx_torch.index_ops import INDEX_OPS
from farm.onnx_torch.math_and_recurrent_ops import MATH_AND_RECURRENT_OPS
from farm.onnx_torch.ml_ops import ML_OPS
from farm.onnx_torch.ml_ops import prepare as prepare_ml
from farm.onnx_torch.ops import OPS, OPSET_SENSITIVE, UnsupportedOperator
from farm.onnx_torch.quantize_ops import QUANTIZE_OPS
from farm.onnx_torch.sequence_ops import SEQUENCE_OPS
from farm.onnx_torch.shape_and_control_ops import SHAPE_AND_CONTROL_OPS

for _table in (CONV_AND_POOL_OPS, SHAPE_AND_CONTROL_OPS, MATH_AND_RECURRENT_OPS, SEQUENCE_OPS, QUANTIZE_OPS, INDEX_OPS,
               ELEMENTWISE_OPS, ATTENTION_OPS):
    OPS.update(_table)
OPS.update(ML_OPS)  # ai.onnx.ml's: _graph_nodes takes them from that domain only

__all__ = ["OPS", "SMALL_INT_CONSTANT", "UnsupportedOperator", "build_module", "forward_source"]

SMALL_INT_CONSTANT = 64  # integer initializers up to this many elements stay Python values
_FLOAT_TYPES = {1, 10, 11, 16}  # onnx.TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16


def _attrs(node) -> dict[str, Any]:
    """A node's attributes, tensors decoded to numpy here, once."""
    from onnx import TensorProto, helper, numpy_helper

    values = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    # owning their data: numpy_helper gives views of the raw bytes, on which torch.compile asserts
    return {k: np.array(numpy_helper.to_array(v), copy=True) if isinstance(v, TensorProto) else v
            for k, v in values.items()}


def _prepare(node, attrs: dict[str, Any], opset: int) -> tuple[dict[str, Any], list[str]]:
    """What some operators need from the graph at build: Split its output count, If's branches and
    Scan's body (nodes, constants, outputs) and the outer values they read, passed as extra inputs;
    the model's opset where an operator's meaning changed with it (OPSET_SENSITIVE); an ai.onnx.ml
    node's attributes as arrays (farm.onnx_torch.ml_ops.prepare)."""
    if node.op_type in OPSET_SENSITIVE and node.domain in ("", "ai.onnx"):
        return {**attrs, "_opset": opset}, []
    if node.domain == "ai.onnx.ml":  # its attributes made tensors once (farm.onnx_torch.ml_ops)
        return prepare_ml(node.op_type, attrs), []
    if node.op_type in ("Split", "LayerNormalization", "Attention"):
        return {**attrs, "_outputs": len(node.output)}, []
    if node.op_type == "Scan" and opset < 9:
        raise UnsupportedOperator("Scan before opset 9 (a batch axis and sequence_lens): the PyTorch backend runs "
                                  "Scan 9 and later")
    if node.op_type == "Scan":  # its body, and the outer values the body reads, passed as extra inputs
        body = _branch(attrs["body"], opset)
        inputs = [i.name for i in attrs["body"].input]
        free = [f for f in body["free"] if f not in inputs]
        rest = {k: v for k, v in attrs.items() if k != "body"}
        return {**rest, "_body": body, "_body_inputs": inputs, "_free": free}, free
    if node.op_type != "If":
        return attrs, []
    branches = {key: _branch(attrs[name], opset) for key, name in (("_then", "then_branch"), ("_else", "else_branch"))}
    free = sorted(set(branches["_then"]["free"]) | set(branches["_else"]["free"]))
    return {**branches, "_free": free}, free


def _branch(graph, opset: int) -> dict[str, Any]:
    from onnx import numpy_helper

    nodes = _graph_nodes(graph, {}, opset)
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    made = set(constants)
    free = []
    for index, (name, op, ins, outs, attrs) in enumerate(nodes):
        if op == "Constant":
            nodes[index] = (name, op, ins, outs, {"array": _constant_value(attrs)})
        free += [i for i in ins if i and i not in made and i not in free]
        made.update(outs)
    free += [o.name for o in graph.output if o.name not in made and o.name not in free]
    return {"nodes": nodes, "constants": constants, "outputs": [o.name for o in graph.output], "free": free}


def build_module(model, float_dtype=None):
    """An nn.Module that computes `model` (an onnx.ModelProto). Raises UnsupportedOperator."""
    import torch

    class OnnxModule(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            graph = model.graph
            init_names = {t.name for t in graph.initializer}
            self.input_names = [i.name for i in graph.input if i.name not in init_names]
            self.output_names = [o.name for o in graph.output]
            self.float_dtype = float_dtype or torch.float32
            self.constants: dict[str, Any] = {}  # small integer initializers and Constants, as numpy
            self.host_floats: dict[str, Any] = {}  # small float ones, as numpy too (also buffers)
            self.buffer_of: dict[str, str] = {}  # initializer / float Constant name -> buffer attribute
            self.weight_shapes: dict[str, list[int]] = {}
            self.branch_buffers: list[str] = []  # If branches' float constants, as buffers
            _load_initializers(self, graph, torch)
            self.nodes = _graph_nodes(graph, self.weight_shapes, default_opset(model))
            _check_values(graph)
            _branch_buffers(self, self.nodes, torch)
            _fold_constants(self, torch)
            self.source, self._straight = _generate_forward(self)
            self.widen = widened_inputs(graph, self.input_names, torch)
            self.record: Callable[[str, list, list, list], None] | None = None  # set while profiling
            self.annotate = False

        def forward(self, *inputs):
            if self.widen:  # uint16/uint32 inputs as the signed type that holds their values
                inputs = tuple(x if t is None else x.to(t) for x, t in zip(inputs, self.widen))
            if self.annotate or self.record is not None:
                return self._interpret(*inputs)
            return self._straight(self, *inputs)

        def _interpret(self, *inputs):
            """Node by node through a dictionary: each node a profiler range or a record() call."""
            env: dict[str, Any] = dict(self.constants)
            for name, attr in self.buffer_of.items():
                env[name] = getattr(self, attr)
            env.update(zip(self.input_names, inputs))
            for name, op, ins, outs, attrs in self.nodes:
                args = [env[i] if i else None for i in ins]
                if self.annotate:
                    with torch.profiler.record_function(name):
                        result = OPS[op](self, attrs, *args)
                else:
                    result = OPS[op](self, attrs, *args)
                if not isinstance(result, tuple):
                    result = (result,)
                env.update(zip(outs, result))
                if self.record is not None:
                    self.record(name, ins, args, list(result))
            return tuple(env[o] for o in self.output_names)

    return OnnxModule()


def _check_values(graph) -> None:
    """UnsupportedOperator where a graph input or output is not a tensor of numbers: torch has no
    strings, and the interpreter no sequences or maps (ops that make them are named before this)."""
    from onnx import TensorProto

    kinds = {"sequence_type": "a sequence", "map_type": "a map", "optional_type": "an optional",
             "sparse_tensor_type": "a sparse tensor"}
    found = []
    # a classifier's probabilities as ZipMap's sequence of maps: the interpreter gives them as [N, C]
    zipped = {o for node in graph.node if node.op_type == "ZipMap" and node.domain == "ai.onnx.ml" for o in node.output}
    for where, values in (("input", graph.input), ("output", graph.output)):
        for value in values:
            if value.name in zipped:
                continue
            field = value.type.WhichOneof("value")
            if field == "tensor_type" and value.type.tensor_type.elem_type == TensorProto.STRING:
                found.append(f"{where} {value.name!r} is a string tensor")
            elif field in kinds:
                found.append(f"{where} {value.name!r} is {kinds[field]}")
    if found:
        raise UnsupportedOperator(f"the PyTorch backend runs tensors of numbers only, and {', '.join(found)}")


def _branch_buffers(module, nodes: list[tuple], torch) -> None:
    """The floating-point initializers and Constants inside If branches and Scan bodies (nested too)
    become buffers of the module, as the main graph's are: on its device and in its dtype, never
    copied from the host on a query."""
    for _, op, _, _, attrs in nodes:
        for key in {"If": ("_then", "_else"), "Scan": ("_body",)}.get(op, ()):
            branch = attrs[key]
            branch.setdefault("buffers", {})
            for name in [n for n, array in branch["constants"].items() if array.dtype.kind == "f"]:
                branch["buffers"][name] = _add_branch_buffer(module, branch["constants"].pop(name), torch)
            for index, (name, kind, ins, outs, held) in enumerate(branch["nodes"]):
                array = held.get("array") if kind == "Constant" else None
                if array is not None and np.asarray(array).dtype.kind == "f":
                    branch["nodes"][index] = (name, kind, ins, outs, {"buffer": _add_branch_buffer(module, array, torch)})
            _branch_buffers(module, branch["nodes"], torch)


def _add_branch_buffer(module, array, torch) -> str:
    """Register one branch constant as a float32 buffer; its attribute name."""
    attr = f"g{len(module.branch_buffers)}"
    module.register_buffer(attr, torch.from_numpy(np.array(array, dtype="float32")))
    module.branch_buffers.append(attr)
    return attr


def forward_source(module) -> str:
    """The generated forward of a module from build_module (for reading and debugging)."""
    return module.source


def _load_initializers(module, graph, torch) -> None:
    """Small integer initializers stay numpy constants (shape arithmetic); the rest are buffers."""
    from onnx import numpy_helper

    for i, tensor in enumerate(graph.initializer):
        array = numpy_helper.to_array(tensor)
        module.weight_shapes[tensor.name] = list(array.shape)
        _keep(module, torch, tensor.name, array, f"w{i}")


def _keep(module, torch, name: str, array, attr: str) -> None:
    if array.dtype.kind in "iub" and array.size <= SMALL_INT_CONSTANT:
        module.constants[name] = np.array(array, copy=True)  # owning its data: torch.compile asserts on numpy views
    else:
        module.register_buffer(attr, torch.from_numpy(array.copy()))
        module.buffer_of[name] = attr
        if array.dtype.kind == "f" and array.size <= SMALL_INT_CONSTANT:
            module.host_floats[name] = np.array(array, copy=True)


def _constant_value(attrs: dict[str, Any]):
    """A Constant node's value as numpy, from whichever attribute holds it (None if none does)."""
    from onnx import numpy_helper

    if "value" in attrs:
        value = attrs["value"]
        return value if isinstance(value, np.ndarray) else numpy_helper.to_array(value)
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                       ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    return None


def _fold_constants(module, torch) -> None:
    """Decode every Constant node once: floats become buffers (cast with the module), integers
    host values; the node stays (per-layer rows name it) and returns what was decoded."""
    for index, (name, op, ins, outs, attrs) in enumerate(module.nodes):
        if op != "Constant" or not outs:
            continue
        array = _constant_value(attrs)
        if array is None:
            raise UnsupportedOperator(f"Constant {name}: only value, value_float(s) and value_int(s) are supported")
        if array.dtype.kind == "f":
            array = array.astype("float32")
        _keep(module, torch, outs[0], array, f"c{index}")
        held = {"array": module.constants[outs[0]]} if outs[0] in module.constants else {
            "buffer": module.buffer_of[outs[0]]}
        module.nodes[index] = (name, op, ins, outs, held)


def _graph_nodes(graph, weight_shapes: dict[str, list[int]], opset: int) -> list[tuple]:
    """(name, op, inputs, outputs, attributes) per node; UnsupportedOperator names every missing op.
    A float Constant node's value is a weight, as an initializer is (added to `weight_shapes`)."""
    for node in graph.node:
        value = next((a.t for a in node.attribute if a.name == "value"), None) \
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") else None
        if value is not None and value.data_type in _FLOAT_TYPES and node.output:
            weight_shapes[node.output[0]] = list(value.dims)
    nodes, missing = [], set()
    for index, node in enumerate(graph.node):
        if (node.op_type not in ML_OPS) if node.domain == "ai.onnx.ml" else \
                (node.domain not in ("", "ai.onnx") or node.op_type not in OPS or node.op_type in ML_OPS):
            missing.add(f"{node.domain + '.' if node.domain else ''}{node.op_type}")
            continue
        attrs, extra = _prepare(node, _attrs(node), opset)
        nodes.append((node.name or f"{node.op_type}_{index}", node.op_type, list(node.input) + extra,
                      list(node.output), attrs))
    if missing:
        raise UnsupportedOperator(f"the PyTorch backend has no implementation of ONNX operator(s) "
                                  f"{', '.join(sorted(missing))}")
    return nodes


def _literal(value) -> str | None:
    """`value` as Python source when it reads back equal (ints, floats, strings, bytes, lists)."""
    if isinstance(value, (list, tuple)) and not all(isinstance(v, (int, float, str, bytes)) for v in value):
        return None
    if not isinstance(value, (int, float, str, bytes, list, tuple)) or value != value:  # NaN never reads back
        return None
    text = repr(value)
    if "inf" in text:
        return None
    return text


def _generate_forward(module) -> tuple[str, Callable]:
    """Straight-line Python for the graph: `v12 = Conv(self, {...}, v3, self.w4, self.w5)`."""
    names: dict[str, str] = {}
    scope: dict[str, Any] = {}
    for k, name in enumerate(module.input_names):
        names[name] = f"i{k}"
    for k, (name, value) in enumerate(module.constants.items()):
        names[name] = f"K{k}"
        scope[f"K{k}"] = value
    for name, attr in module.buffer_of.items():
        names[name] = f"self.{attr}"
    lines = [f"def forward(self{''.join(', ' + names[n] for n in module.input_names)}):"]
    read = set(module.output_names) | {i for node in module.nodes for i in node[2]}  # values something reads
    for index, (name, op, ins, outs, attrs) in enumerate(module.nodes):
        if op == "Constant":  # its value is already named K<k> or self.c<index>
            continue
        scope.setdefault(f"op_{op}", OPS[op])
        items = []
        for key, value in attrs.items():
            text = _literal(value)
            if text is None:
                scope[f"A{index}_{key}"] = value
                text = f"A{index}_{key}"
            items.append(f"{key!r}: {text}")
        args = ", ".join([_argument(module, names, op, position, i) for position, i in enumerate(ins)]
                         + ["None"] * _missing(OPS[op], len(ins)))
        targets = []
        for j, out in enumerate(outs):
            names[out] = f"v{index}_{j}" if out else "_"
            targets.append(names[out])
        call = f"op_{op}(self, {{{', '.join(items)}}}{', ' + args if args else ''})"
        if len(outs) == 1:
            lines.append(f"    {targets[0]} = {call}  # {name}")
        else:
            needed = tuple(j for j, out in enumerate(outs) if out and out in read)
            lines.append(f"    {', '.join(targets)}, *_rest = _outputs({call}, {len(outs)}, {needed!r}, {op!r})  # {name}")
    lines.append(f"    return ({''.join(names[o] + ', ' for o in module.output_names)})")
    source = "\n".join(lines) + "\n"
    filename = f"<onnx_torch forward {id(module):x}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # tracebacks show it
    scope["_outputs"] = _outputs
    exec(compile(source, filename, "exec"), scope)
    return source, scope["forward"]


# Inputs that operators read only as lists of ints (farm.onnx_torch.ops.ints): a constant there is
# written into the generated call as a tuple literal. Left as a numpy global, torch.compile traces
# it as a tensor and reading its values is a "data dependent operator": a graph break per use (63
# in BERT-base, one per Slice/Reshape of each attention layer).
SHAPE_ARGUMENTS = {"Slice": (1, 2, 3, 4), "Reshape": (1,), "Unsqueeze": (1,), "Squeeze": (1,), "ReduceMean": (1,),
                   "Resize": (3,), "Expand": (1,), "Split": (1,), "ConstantOfShape": (0,)}


# Float inputs that operators read as Python numbers: a small float constant there is written as a
# literal instead of passing its buffer, which the operator would read back from the GPU on every
# query (a sync per Clip; under CUDA graph capture, an error: the PP-OCR and YOLOv8 graphs).
HOST_FLOAT_ARGUMENTS = {"Clip": (1, 2), "Resize": (1, 2), "Range": (0, 1, 2)}


def _argument(module, names: dict[str, str], op: str, position: int, name: str) -> str:
    if not name:
        return "None"
    if position in SHAPE_ARGUMENTS.get(op, ()) and name in module.constants:
        return repr(tuple(int(v) for v in np.asarray(module.constants[name]).reshape(-1)))
    if position in HOST_FLOAT_ARGUMENTS.get(op, ()) and name in module.host_floats:
        return _float_literal(module.host_floats[name], number=op != "Resize")
    return names[name]


def _float_literal(array, number: bool) -> str:
    """A float constant as source: a number `0.5` where the operator reads one (a one-element
    vector too: ONNX Runtime takes Clip bounds of shape [1]), else a tuple `(1.0, 1.0, 2.0, 2.0, )`;
    inf and NaN spelled out."""
    texts = [repr(float(v)) if np.isfinite(v) else f"float({str(float(v))!r})" for v in np.asarray(array).reshape(-1)]
    return texts[0] if number and len(texts) == 1 else f"({''.join(t + ', ' for t in texts)})"


def _missing(fn, given: int) -> int:
    """How many optional inputs a call with `given` inputs leaves to their defaults: the generated
    call passes None for each, so compile guards no function's __defaults__ per call site."""
    import inspect

    params = list(inspect.signature(fn).parameters.values())[2:]  # after (module, attrs)
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 0
    return max(0, len(params) - given)


def _outputs(result, count: int, needed: tuple = (), op: str = "") -> tuple:
    """A multi-output node's results, padded with None where the operator returned fewer: outputs
    nothing reads. One the graph reads (`needed`) and the operator does not make is refused."""
    result = result if isinstance(result, tuple) else (result,)
    missing = [j for j in needed if j >= len(result) or result[j] is None]
    if missing:
        raise UnsupportedOperator(f"the model reads output {missing[0] + 1} of {op}, which the PyTorch backend's "
                                  f"interpreter of ONNX files does not compute: run the model on onnxruntime")
    return tuple(result) + (None,) * (count - len(result) + 1)
