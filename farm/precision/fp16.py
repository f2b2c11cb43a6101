"""fp16: onnxconverter-common's float16 conversion, keeping numerically sensitive operators,
every node that reads a value beyond fp16's range (weights, and activations of a seeded run of the
fp32 model) and (by default) the model's inputs and outputs in fp32; then the graph made
consistent again (casts, topological order)."""

from __future__ import annotations

import heapq
from pathlib import Path

import numpy as np

from farm.precision.checks import (
    FP16_MAX,
    TransformUnsupported,
    bodies,
    census,
    graphs,
    nodes,
    one_line,
    short_error,
    transform_label,
)

# Kept in fp32 by the fp16 conversion (besides onnxconverter-common's own list): reductions and
# normalisations whose range or accumulated error fp16 does not hold.
SENSITIVE_OPS = ["LayerNormalization", "Softmax", "ReduceMean", "ReduceSum", "Pow", "Exp", "Log", "Erf", "Sqrt"]
# Kept too because their float inputs are defined as fp32 only: dynamic quantization (a dynamically
# quantized model's int8 parts stay int8 and its float parts around them stay fp32), and Resize
# (its scales are float32 by the standard).
FP32_ONLY_OPS = ["DynamicQuantizeLinear", "DynamicQuantizeLSTM", "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
                 "QuantizeLinear", "DequantizeLinear", "Resize"]

# A float cast to an integer is kept fp32 with the arithmetic that makes it, this many nodes back
# through these operators (Cast <- Floor <- Div <- Mul: a quantized bias and its scales).
ROUNDING_ARITHMETIC = {"Floor", "Ceil", "Round", "Div", "Mul", "Add", "Sub", "Neg", "Abs", "Clip", "Min", "Max"}
INTEGER_CHAIN_DEPTH = 3


def to_fp16(model_path: Path, output: Path, keep_io_types: bool, inputs, shapes, seed: int) -> dict:
    import onnx
    from onnx import TensorProto
    from onnxconverter_common import float16

    label = transform_label("fp16")
    model = onnx.load(str(model_path))
    _name_nodes(model)
    for graph, _ in graphs(model.graph):  # stale value_info misleads its output Casts (a wrong-typed model)
        del graph.value_info[:]
    if keep_io_types:
        _inputs_read_in_subgraphs(model)
    _explicit_fill_values(model)
    before = census(model)
    typed = _with_types(model)  # once: the activation range and integer checks both read its types
    activations, unchecked = _checked_activations(model, typed, inputs, shapes, seed)
    out_of_range = _weights_out_of_range(model) | activations
    integer = _integer_arithmetic(model, typed or model)
    out_of_range -= integer  # counted once, as integer arithmetic
    blocked_ops = sorted(set(float16.DEFAULT_OP_BLOCK_LIST) | set(SENSITIVE_OPS) | set(FP32_ONLY_OPS))
    kept_nodes = out_of_range | integer
    _unshare_initializers(model, set(blocked_ops), kept_nodes)
    try:
        # max_finite_val: nothing is clamped below fp16's own range (the default clamps to 1e4);
        # what lies beyond it stays fp32 (node_block_list).
        converted = float16.convert_float_to_float16(
            model, keep_io_types=keep_io_types, op_block_list=blocked_ops, node_block_list=sorted(kept_nodes),
            max_finite_val=FP16_MAX)
    except Exception as exc:
        raise TransformUnsupported(one_line(f"{label} failed: {type(exc).__name__}: {exc}"),
                                   f"{label} failed:\n{exc}") from exc
    _outputs_read_inside(converted, set(blocked_ops), kept_nodes)
    _initializer_inputs_typed(converted)
    _sort_graphs(_consistent_casts(converted))
    after = census(converted)
    weights = after.weights[TensorProto.FLOAT16] - before.weights[TensorProto.FLOAT16]
    activations = after.values[TensorProto.FLOAT16] - before.values[TensorProto.FLOAT16]
    if weights <= 0 and activations <= 0:
        raise TransformUnsupported(
            f"{label} changed nothing: no float tensor was converted to fp16 "
            f"({before.weights[TensorProto.FLOAT]} fp32 weights, {before.nodes} nodes)")
    blocked = set(blocked_ops)
    kept_ops = sum(1 for n in nodes(model.graph) if n.op_type in blocked and n.name not in kept_nodes)
    kept_range = sum(1 for n in nodes(model.graph) if n.name in out_of_range)
    kept_integer = sum(1 for n in nodes(model.graph) if n.name in integer)
    onnx.save(converted, str(output))
    integer_text = f", {kept_integer} computing integers" if kept_integer else ""
    summary = (f"fp16: {weights} weights and {activations} activations converted, "
               f"{kept_ops + kept_range + kept_integer} nodes kept fp32 ({kept_range} for values beyond fp16's range, "
               f"{kept_ops} numerically sensitive{integer_text}), {after.subgraphs} subgraphs"
               f"{' converted too' if after.subgraphs else ''}{unchecked}")
    return {"summary": summary, "tool": label.split("(")[1].rstrip(")"), "counts": {
        "tensors_fp16": weights + activations, "nodes_kept_fp32": kept_ops + kept_range + kept_integer,
        "nodes_kept_fp32_range": kept_range, "subgraphs": after.subgraphs, "qdq_pairs": 0, "quantized_nodes": 0}}


def _outputs_read_inside(model, blocked_ops: set[str], blocked_nodes: set[str]) -> None:
    """A graph output that nodes also read (a recurrent model's new state): with keep_io_types,
    onnxconverter-common makes the output fp32 through a Cast but leaves its fp16 readers reading
    the fp32 name (an invalid model). Those readers read the Cast's fp16 input instead."""
    from onnx import TensorProto

    outputs = {o.name for o in model.graph.output if o.type.tensor_type.elem_type == TensorProto.FLOAT}
    fp16_source = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "Cast"
                   and n.output[0] in outputs and any(a.name == "to" and a.i == TensorProto.FLOAT for a in n.attribute)}
    if not fp16_source:
        return
    for node in nodes(model.graph):
        if node.op_type in blocked_ops or node.name in blocked_nodes or (
                node.op_type == "Cast" and node.output[0] in fp16_source):
            continue
        for i, name in enumerate(node.input):
            if name in fp16_source:
                node.input[i] = fp16_source[name]


def _inputs_read_in_subgraphs(model) -> None:
    """A float graph input that only `If`/`Loop` bodies read (a voice model's audio): with
    keep_io_types, onnxconverter-common casts an input to fp16 for its main-graph readers only, and
    the converted bodies read it fp32 (an invalid model). The bodies read it through an Identity in
    the main graph instead, which the converter gives its Cast."""
    from onnx import TensorProto, helper

    floats = {i.name for i in model.graph.input if i.type.tensor_type.elem_type == TensorProto.FLOAT}
    read_inside = floats & set().union(*(_outer_names(n) for n in model.graph.node)) if floats else set()
    if not read_inside:
        return
    renamed = {name: f"{name}__inner" for name in sorted(read_inside)}

    def rename(graph) -> None:
        local = {v.name for v in graph.input} | {o for n in graph.node for o in n.output}
        for node in graph.node:
            for i, name in enumerate(node.input):
                if name in renamed and name not in local:
                    node.input[i] = renamed[name]
            for body in bodies(node):
                rename(body)

    for node in model.graph.node:
        for body in bodies(node):
            rename(body)
    for name, inner in reversed(renamed.items()):
        model.graph.node.insert(0, helper.make_node("Identity", [name], [inner], name=f"{inner}_identity"))


def _explicit_fill_values(model) -> None:
    """A ConstantOfShape without a `value` fills with fp32 zeros (the standard's default): the
    converter retypes its output fp16 but has no attribute to convert (torch.onnx's export of
    `new_zeros`, e.g. swin's attention mask). The default is written out, for it to convert."""
    from onnx import TensorProto, helper

    for node in nodes(model.graph):
        if node.op_type == "ConstantOfShape" and not any(a.name == "value" for a in node.attribute):
            node.attribute.append(helper.make_attribute("value", helper.make_tensor("value", TensorProto.FLOAT,
                                                                                  [1], [0.0])))


def _initializer_inputs_typed(model) -> None:
    """Weights also listed as graph inputs (ONNX before IR 4 required it): the converter makes the
    weight fp16 and leaves the input's declared type fp32 (an invalid model). The declaration
    follows the weight."""
    for graph, _ in graphs(model.graph):
        weights = {t.name: t.data_type for t in graph.initializer}
        for value in graph.input:
            if value.name in weights and value.type.tensor_type.elem_type != weights[value.name]:
                value.type.tensor_type.elem_type = weights[value.name]


def _unshare_initializers(model, blocked_ops: set[str], blocked_nodes: set[str]) -> None:
    """A float initializer read by nodes kept in fp32 and by converted ones (a shared scale):
    onnxconverter-common leaves it fp32 for both (an invalid model). The kept nodes read a copy."""
    from onnx import TensorProto

    for graph, _ in graphs(model.graph):
        floats = {t.name: t for t in graph.initializer if t.data_type == TensorProto.FLOAT}
        readers: dict[str, list[object]] = {}
        for node in nodes(graph):  # subgraphs read their parents' initializers too
            for name in node.input:
                if name in floats:
                    readers.setdefault(name, []).append(node)
        for name, users in readers.items():
            kept = [n for n in users if n.op_type in blocked_ops or n.name in blocked_nodes]
            if not kept or len(kept) == len(users):
                continue
            copy = TensorProto()
            copy.CopyFrom(floats[name])
            copy.name = f"{name}__fp32"
            graph.initializer.append(copy)
            for node in kept:
                for i, input_name in enumerate(node.input):
                    if input_name == name:
                        node.input[i] = copy.name


def _name_nodes(model) -> None:
    """Every node named, uniquely: the fp16 block list and the Casts it adds go by node name."""
    seen: set[str] = set()
    for index, node in enumerate(nodes(model.graph)):
        if not node.name or node.name in seen:
            node.name = f"{node.name or node.op_type}__{index}"
        seen.add(node.name)


def _consumers(model) -> dict[str, list[object]]:
    consumers: dict[str, list[object]] = {}
    for graph, _ in graphs(model.graph):
        for node in graph.node:
            for name in [*node.input, *_outer_names(node)]:
                consumers.setdefault(name, []).append(node)
    return consumers


def _weights_out_of_range(model) -> set[str]:
    """Nodes that read (or are) a float constant with a finite value beyond fp16's range."""
    from onnx import TensorProto, numpy_helper

    consumers = _consumers(model)
    blocked: set[str] = set()

    def beyond(tensor) -> bool:
        if tensor.data_type != TensorProto.FLOAT:
            return False
        values = numpy_helper.to_array(tensor)
        finite = values[np.isfinite(values)]
        return bool(finite.size) and float(np.abs(finite).max()) > FP16_MAX

    for graph, _ in graphs(model.graph):
        for tensor in graph.initializer:
            if beyond(tensor):
                blocked.update(n.name for n in consumers.get(tensor.name, []))
        for node in graph.node:
            if node.op_type == "Constant" and any(a.name == "value" and beyond(a.t) for a in node.attribute):
                blocked.add(node.name)
                blocked.update(n.name for n in consumers.get(node.output[0], []))
    return blocked


def _with_types(model):
    """The model with the types ONNX's shape inference gives its values, or None where it fails."""
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - e.g. beyond 2 GB: the checks that read types say what they could not do
        return None


def _checked_activations(model, typed, inputs, shapes, seed: int) -> tuple[set[str], str]:
    """_activations_out_of_range, or nothing and the summary's note of why it was not checked."""
    if typed is None:
        return set(), "; activation ranges not checked (ONNX shape inference failed on the model)"
    try:
        return _activations_out_of_range(model, typed, inputs, shapes, seed), ""
    except Exception as exc:  # noqa: BLE001 - e.g. beyond 2 GB, or a model ORT cannot run: the measurement says so later
        return set(), f"; activation ranges not checked (running the fp32 model: {short_error(exc)})"


def _integer_arithmetic(model, typed) -> set[str]:
    """Nodes kept fp32 because they hold integers fp16 cannot: a float cast to an integer with the
    arithmetic that makes it (a dynamically quantized model's bias, Div(bias, input scale x weight
    scale) -> Floor -> Cast(int32), whose quotient leaves fp16's range for some inputs), and a wide
    integer made float with the Mul or Div that scales it (an int32 accumulator of ConvInteger or
    MatMulInteger, up to 2^31, dequantized). Converted, ONNX Runtime CUDA gave a quantized OCR
    model's output as the same saturated values for every input; ONNX Runtime's CPU EP runs such
    fp16 arithmetic in fp32 kernels and hides it."""
    from onnx import TensorProto

    integers = {TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
                TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64}
    wide = {TensorProto.INT32, TensorProto.INT64, TensorProto.UINT32, TensorProto.UINT64}
    # `typed`: the model with its inferred types (_with_types), else the model (then only the casts
    # to integers are found)
    types = {v.name: v.type.tensor_type.elem_type for graph, _ in graphs(typed.graph)
             for v in [*graph.input, *graph.value_info, *graph.output]}
    types |= {t.name: t.data_type for graph, _ in graphs(typed.graph) for t in graph.initializer}
    consumers = _consumers(model)
    blocked: set[str] = set()
    for graph, _ in graphs(model.graph):
        producer = {out: node for node in graph.node for out in node.output if out}
        for node in graph.node:
            if node.op_type != "Cast":
                continue
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            if to in integers:
                blocked.add(node.name)
                frontier = [node.input[0]]
                for _ in range(INTEGER_CHAIN_DEPTH):
                    makers = [producer[name] for name in frontier if name in producer]
                    makers = [m for m in makers if m.op_type in ROUNDING_ARITHMETIC and m.name not in blocked]
                    blocked.update(m.name for m in makers)
                    frontier = [name for m in makers for name in m.input]
            elif to == TensorProto.FLOAT and types.get(node.input[0]) in wide:
                blocked.add(node.name)
                blocked.update(c.name for c in consumers.get(node.output[0], []) if c.op_type in ("Mul", "Div"))
    return blocked


def _activations_out_of_range(model, inferred, inputs, shapes, seed: int) -> set[str]:
    """Nodes of the main graph that make or read a float activation beyond fp16's range on the
    cell's seeded inputs (what ModelOpt's AutoCast calls its data-max rule); `inferred`: the model
    with its inferred types (_with_types)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto

    from farm.models import make_feeds

    floats = {v.name: v for v in inferred.graph.value_info if v.type.tensor_type.elem_type == TensorProto.FLOAT}
    probe = onnx.ModelProto()
    probe.CopyFrom(inferred)
    shapes = probe_shapes(inputs, shapes)
    declared = {o.name for o in probe.graph.output}
    probe.graph.output.extend(v for name, v in floats.items() if name not in declared)
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    values = session.run(None, make_feeds(inputs, shapes, seed))
    beyond = {name for name, value in zip(names, values)
              if isinstance(value, np.ndarray) and value.dtype == np.float32 and value.size
              and float(np.abs(value[np.isfinite(value)]).max(initial=0.0)) > FP16_MAX}
    return {n.name for n in model.graph.node if beyond & {*n.input, *n.output}}


def probe_shapes(inputs, shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The shapes of the activation-range run: every activation is kept at once, so one sample
    where the batch axis is dynamic."""
    return {spec.name: tuple(1 if axis == spec.batch_axis and isinstance(spec.shape[axis], str) else size
                             for axis, size in enumerate(shapes[spec.name])) for spec in inputs}


def _outer_names(node) -> set[str]:
    """Names a node's subgraphs read from the enclosing scopes (the node's implicit inputs)."""
    outer: set[str] = set()
    for graph in bodies(node):
        local = {v.name for v in graph.input} | {t.name for t in graph.initializer}
        local |= {o for n in graph.node for o in n.output}
        for inner in graph.node:
            outer.update(name for name in [*inner.input, *_outer_names(inner)] if name and name not in local)
    return outer


def _sort_graphs(model) -> None:
    """Order every graph's nodes topologically, counting what a node's subgraphs read from outside
    as its inputs: onnxconverter-common appends Casts and sorts by explicit inputs only, which
    puts an `If` before the Cast making a tensor its branches read (an invalid model)."""
    from onnx import NodeProto

    for graph, _ in reversed(list(graphs(model.graph))):  # subgraphs first: their parents copy them
        produced = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
        needs = [{produced[x] for x in [*n.input, *_outer_names(n)] if x in produced} - {i}
                 for i, n in enumerate(graph.node)]
        users: dict[int, list[int]] = {}
        for i, need in enumerate(needs):
            for j in need:
                users.setdefault(j, []).append(i)
        waiting = [len(need) for need in needs]
        ready = [i for i, count in enumerate(waiting) if count == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for user in users.get(i, []):
                waiting[user] -= 1
                if waiting[user] == 0:
                    heapq.heappush(ready, user)
        if len(order) != len(graph.node) or order == list(range(len(graph.node))):
            continue  # a cycle (the checker says so) or already in order
        copies = []
        for i in order:
            copy = NodeProto()
            copy.CopyFrom(graph.node[i])
            copies.append(copy)
        del graph.node[:]
        graph.node.extend(copies)


def _consistent_casts(model):
    """onnxconverter-common retypes a `Cast(to=FLOAT)` node's output as fp16 but leaves its `to`
    attribute (BERT's attention-mask cast): make the attribute agree, or ONNX Runtime rejects it."""
    from onnx import TensorProto

    for graph, _ in graphs(model.graph):
        declared = {v.name: v.type.tensor_type.elem_type for v in [*graph.value_info, *graph.output]}
        for node in graph.node:
            if node.op_type != "Cast" or declared.get(node.output[0]) != TensorProto.FLOAT16:
                continue
            for attribute in node.attribute:
                if attribute.name == "to" and attribute.i == TensorProto.FLOAT:
                    attribute.i = TensorProto.FLOAT16
    return model
