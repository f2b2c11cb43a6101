"""Checks run on every transformed model before it is cached or measured: the transforms are
checked, not trusted (docs/precision.md).

- `census`: what a model holds, subgraphs (If/Loop/Scan bodies) included: float tensors by
  type, nodes, Casts, Q/DQ pairs, quantized nodes.
- `verify`: onnx.checker (full check: strict shape and type inference) and a load in ONNX
  Runtime on CPU; a failure is a `TransformUnsupported` naming the transform.
- `onnxruntime_cpu_note`: how ONNX Runtime's CPU execution provider runs the transformed model,
  read from the graph it optimizes: fp16 nodes without an fp16 CPU kernel run as fp32 kernels
  between Casts it inserts; Q/DQ groups without an integer kernel run fp32 kernels on
  dequantized values.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

SAVE_OPTIMIZED_BELOW = 1_500_000_000  # bytes of the transformed model
REASON_LIMIT = 480  # characters of a reason (cells.reason); the full text goes to the traceback
FP16_MAX = 65504.0
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
# ONNX Runtime CPU kernels that compute on integers (what a Q/DQ group becomes when ORT fuses it).
INTEGER_KERNELS = ("QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger", "MatMulIntegerToFloat",
                   "QGemm", "QLinearAdd", "QLinearMul", "QLinearAveragePool", "QLinearGlobalAveragePool",
                   "QLinearConcat", "QLinearLeakyRelu", "QLinearSigmoid", "QLinearSoftmax", "QLinearWhere",
                   "QAttention", "QEmbedLayerNormalization", "DynamicQuantizeMatMul", "QLinearReduceMean",
                   "MaxPool")  # MaxPool: ORT runs the int8 MaxPool of a Q/DQ group on int8 data


class TransformUnsupported(Exception):
    """A transform whose output cannot be stored under the precision asked for. `reason` is one
    line naming the transform; `detail` is the full text (the cell's traceback)."""

    def __init__(self, reason: str, detail: str = "", cacheable: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail or reason
        self.cacheable = cacheable  # False where the verdict may depend on the moment (memory)


def one_line(text: str, limit: int = REASON_LIMIT) -> str:
    """`text` on one line, whole sentences only; when even the first sentence is longer than
    `limit`, its words up to the limit and a pointer to the full text."""
    flat = re.sub(r"\s+", " ", text).strip()
    if len(flat) <= limit:
        return flat
    sentences = re.split(r"(?<=[.;])\s+", flat)
    kept = ""
    for sentence in sentences:
        if len(kept) + len(sentence) + 1 > limit:
            break
        kept = f"{kept} {sentence}".strip()
    if kept:
        return kept
    suffix = " ... (full text in the traceback)"
    words = flat[:limit - len(suffix)].rsplit(" ", 1)[0]
    return words + suffix


def short_error(exc: BaseException, limit: int = 160) -> str:
    """An error in a few words for a summary: ONNX Runtime's text after its "failed:" prefix, the
    words up to `limit`."""
    text = re.sub(r"\s+", " ", str(exc)).strip()
    text = text.rsplit("failed:", 1)[-1].strip() or type(exc).__name__
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


def bodies(node) -> list[object]:
    """The subgraphs a node holds directly (an If's branches, a Loop's or Scan's body)."""
    return [g for attribute in node.attribute for g in ([attribute.g] if attribute.HasField("g") else [])
            + list(attribute.graphs)]


def graphs(graph) -> Iterator[tuple[object, int]]:
    """`graph` and every subgraph in it, with its depth (0: the main graph)."""
    stack = [(graph, 0)]
    while stack:
        current, depth = stack.pop()
        yield current, depth
        for node in current.node:
            stack.extend((g, depth + 1) for g in bodies(node))


def nodes(graph) -> Iterator[object]:
    for current, _ in graphs(graph):
        yield from current.node


@dataclasses.dataclass
class Census:
    """What a model holds, subgraphs included."""

    nodes: int = 0
    subgraphs: int = 0
    subgraph_nodes: int = 0
    casts: int = 0
    weights: Counter = dataclasses.field(default_factory=Counter)  # initializers and Constant tensors by type
    values: Counter = dataclasses.field(default_factory=Counter)  # typed values (inputs, outputs, value_info)
    qdq_pairs: int = 0  # QuantizeLinear -> DequantizeLinear (quantized activations)
    quantized_weights: int = 0  # DequantizeLinear of an integer initializer
    quantized_nodes: int = 0  # nodes (not Q/DQ) reading a DequantizeLinear's output
    ops: Counter = dataclasses.field(default_factory=Counter)


def census(model) -> Census:
    from onnx import TensorProto

    result = Census()
    producers: dict[str, object] = {}
    integer_initializers: set[str] = set()
    for graph, depth in graphs(model.graph):
        if depth:
            result.subgraphs += 1
            result.subgraph_nodes += len(graph.node)
        for tensor in graph.initializer:
            result.weights[tensor.data_type] += 1
            if tensor.data_type in (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT4, TensorProto.UINT4,
                                    TensorProto.INT16, TensorProto.UINT16, TensorProto.INT32):
                integer_initializers.add(tensor.name)
        for value in [*graph.input, *graph.output, *graph.value_info]:
            if value.type.HasField("tensor_type"):
                result.values[value.type.tensor_type.elem_type] += 1
        for node in graph.node:
            result.nodes += 1
            result.ops[node.op_type] += 1
            result.casts += node.op_type == "Cast"
            for output in node.output:
                producers[output] = node
            if node.op_type == "Constant":
                for attribute in node.attribute:
                    if attribute.name == "value":
                        result.weights[attribute.t.data_type] += 1
    for node in nodes(model.graph):
        if node.op_type == "DequantizeLinear" and node.input:
            source = producers.get(node.input[0])
            if source is not None and source.op_type == "QuantizeLinear":
                result.qdq_pairs += 1
            elif node.input[0] in integer_initializers:
                result.quantized_weights += 1
        elif node.op_type not in QDQ_OPS and any(
                (p := producers.get(name)) is not None and p.op_type == "DequantizeLinear" for name in node.input):
            result.quantized_nodes += 1
    return result


# what a user can do when farm's conversion cannot keep the model valid at that precision
INVALID_ADVICE = ("; what to do: measure it at fp32 on this engine, or at this precision on PyTorch (which converts "
                  "its module itself), or convert the model yourself and give that file as the source")


def verify(path: Path, label: str, scratch: Path, original: Path, quantized: bool = False) -> tuple[str | None, str]:
    """onnx.checker (full check) and a load in ONNX Runtime on CPU; a failure raises
    TransformUnsupported "`label` produced an invalid model: ...". Returns the note from
    `onnxruntime_cpu_note` (None when it has nothing to say) and what the summary must add: that
    the ONNX Runtime load was skipped because the original model does not load there either
    (a TensorRT plugin, say), or ""."""
    import onnx
    import onnxruntime as ort

    try:
        onnx.checker.check_model(str(path), full_check=True)  # by path: works beyond 2 GB
    except Exception as exc:  # noqa: BLE001 - onnx raises ValidationError, InferenceError and others
        raise TransformUnsupported(one_line(f"{label} produced an invalid model (onnx.checker): {exc}") + INVALID_ADVICE,
                                   f"{label} produced an invalid model (onnx.checker):\n{exc}") from None
    with tempfile.TemporaryDirectory(prefix="verify.", dir=scratch) as folder:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        # ORT inserts its Casts at every level; BASIC keeps the node names (fp16: which node ran
        # how), EXTENDED adds the Q/DQ fusions into integer kernels (int8); neither is hardware
        # specific (NCHWc layouts come with ALL).
        options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED if quantized
                                            else ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
        optimized_path = Path(folder) / "optimized.onnx"
        if path.stat().st_size < SAVE_OPTIMIZED_BELOW:  # ORT cannot save one beyond protobuf's 2 GB
            options.optimized_model_filepath = str(optimized_path)
        try:
            ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - any refusal by ONNX Runtime: judged below
            try:
                ort.InferenceSession(str(original), providers=["CPUExecutionProvider"])
            except Exception as original_exc:  # noqa: BLE001 - not the transform's doing
                return None, (f"; not loaded in ONNX Runtime: the original model does not load there either "
                              f"({short_error(original_exc)})")
            raise TransformUnsupported(
                one_line(f"{label} produced a model ONNX Runtime cannot load: {exc}") + INVALID_ADVICE,
                f"{label} produced a model ONNX Runtime cannot load:\n{exc}", cacheable=False) from None
        try:
            optimized = onnx.load(str(optimized_path))
        except Exception:  # noqa: BLE001 - not saved (too large), or not readable: say nothing
            return None, ""
    return onnxruntime_cpu_note(onnx.load(str(path), load_external_data=False), optimized), ""


def _types(model) -> dict[str, int]:
    """Element type of every tensor name the model declares or a Cast makes, subgraphs included."""
    types: dict[str, int] = {}
    for graph, _ in graphs(model.graph):
        for value in [*graph.input, *graph.output, *graph.value_info]:
            if value.type.HasField("tensor_type"):
                types[value.name] = value.type.tensor_type.elem_type
        for tensor in graph.initializer:
            types[tensor.name] = tensor.data_type
        for node in graph.node:
            if node.op_type == "Cast":
                types[node.output[0]] = next(a.i for a in node.attribute if a.name == "to")
            elif node.op_type == "Constant":
                for attribute in node.attribute:
                    if attribute.name == "value":
                        types[node.output[0]] = attribute.t.data_type
    return types


def quantized_run_note(where: str, quantized: int, optimized) -> str | None:
    """How ONNX Runtime ran an int8 Q/DQ model of `quantized` quantized nodes (its census), from the
    graph it optimized: the Q/DQ groups it fused into integer kernels, and the DequantizeLinear left
    feeding float kernels (their arithmetic is float: the cell's latency is not int8 arithmetic's)."""
    if not quantized:
        return None
    fused = sum(1 for n in nodes(optimized.graph) if n.op_type in INTEGER_KERNELS and n.op_type != "MaxPool")
    left = sum(1 for n in nodes(optimized.graph) if n.op_type == "DequantizeLinear")
    return (f"on {where}: {fused} integer kernels (QLinearConv, QLinearMatMul, MatMulInteger, ...) "
            f"for {quantized} quantized nodes; {left} DequantizeLinear left feed fp32 kernels")


def onnxruntime_cpu_note(transformed, optimized) -> str | None:
    """What ONNX Runtime's CPU EP makes of the transformed model, from the graph it optimized."""
    from onnx import TensorProto, shape_inference

    try:
        transformed = shape_inference.infer_shapes(transformed)
    except Exception:  # noqa: BLE001 - types from what the model declares
        pass
    before, after = _types(transformed), _types(optimized)
    optimized_nodes = {n.name: n for n in nodes(optimized.graph) if n.name}
    census_before = census(transformed)
    if census_before.qdq_pairs or census_before.quantized_weights:
        return quantized_run_note("ONNX Runtime CPU", census_before.quantized_nodes, optimized)
    fp16_nodes = fp32_in_ort = 0
    for node in nodes(transformed.graph):
        if node.op_type in ("Cast", "Constant", "If", "Loop", "Scan") or not node.name:
            continue
        if not any(before.get(name) == TensorProto.FLOAT16 for name in [*node.input, *node.output] if name):
            continue
        fp16_nodes += 1
        ran = optimized_nodes.get(node.name)
        if ran is not None and not any(after.get(name) == TensorProto.FLOAT16 for name in ran.input if name) \
                and any(after.get(name) == TensorProto.FLOAT for name in ran.input if name):
            fp32_in_ort += 1
    inserted = sum(1 for n in nodes(optimized.graph)
                   if n.op_type == "Cast" and n.name.startswith("InsertedPrecisionFree"))
    if not fp16_nodes:
        return None
    if not fp32_in_ort and not inserted:
        return f"on ONNX Runtime CPU: {fp16_nodes} fp16 nodes run fp16 kernels"
    return (f"on ONNX Runtime CPU: {fp32_in_ort} of {fp16_nodes} fp16 nodes run fp32 kernels, ONNX Runtime "
            f"casting around them ({inserted} Casts inserted: its CPU EP has fp16 kernels for few operators)")


def transform_label(precision: str) -> str:
    """The transform, named in every reason: its precision, library and version."""
    from importlib.metadata import version

    if precision == "fp16":
        return f"fp16 transform (onnxconverter-common {version('onnxconverter-common')})"
    return f"int8 transform (onnxruntime.quantization {version('onnxruntime')})"
