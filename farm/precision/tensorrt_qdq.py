"""TensorRT's rules for an explicitly quantized (Q/DQ) ONNX model, and the one repair farm makes.

TensorRT 11 takes precision only from the model: int8 and fp8 come as QuantizeLinear /
DequantizeLinear pairs. Its ONNX parser's operator table (onnx-tensorrt, docs/operators.md) says
what it accepts of them:

- QuantizeLinear: a float input (fp32, fp16, bf16), a zero point of 0;
- DequantizeLinear: an int8 or fp8 input (int4 for weights on 10.x and later), a zero point of 0;
- no ONNX Runtime quantized operators (QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger,
  DynamicQuantizeLinear); uint8 only as a network input or output.

farm's int8 transform (ONNX Runtime's `quantize_static`, symmetric int8: zero points 0) meets all
but one: it quantizes biases to int32 behind a DequantizeLinear, which ONNX Runtime fuses into its
integer kernels and TensorRT's parser does not take. `for_tensorrt` folds each such bias back to the
float tensor its DequantizeLinear computes (int32 × scale, exactly) in a copy of the model the
TensorRT backends build from; whatever else breaks a rule makes the cell `unsupported`, naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

QUANTIZED_ORT_OPS = ("QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "DynamicQuantizeLinear")


def _constants(model: Any) -> dict[str, Any]:
    """Every initializer and Constant tensor of the main graph, by name, as TensorProtos: a reader
    converts only the few it looks at (zero points, scales, biases), never every weight."""
    values = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.name == "value":
                    values[node.output[0]] = attribute.t
    return values


def problems(model: Any) -> list[str]:
    """What TensorRT's parser would reject in `model`'s Q/DQ form, one phrase each (empty: nothing)."""
    import numpy as np
    from onnx import TensorProto, numpy_helper

    constants = _constants(model)
    types = {t.name: t.data_type for t in model.graph.initializer}
    for value in [*model.graph.value_info, *model.graph.input, *model.graph.output]:
        if value.type.HasField("tensor_type"):
            types.setdefault(value.name, value.type.tensor_type.elem_type)
    found: dict[str, int] = {}

    def add(what: str) -> None:
        found[what] = found.get(what, 0) + 1

    for node in model.graph.node:
        if node.op_type in QUANTIZED_ORT_OPS:
            add(f"{node.op_type} (an ONNX Runtime quantized operator TensorRT does not have)")
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        stored = constants.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        point = numpy_helper.to_array(stored) if stored is not None else None
        if point is not None and np.any(point != 0):
            add(f"{node.op_type} with a zero point other than 0")
        if node.op_type == "DequantizeLinear":
            kind = types.get(node.input[0])
            if kind == TensorProto.INT32:
                add("DequantizeLinear of int32 (a quantized bias)")
            elif kind == TensorProto.UINT8 or (point is not None and point.dtype == np.uint8):
                add("DequantizeLinear of uint8")
        elif point is not None and point.dtype == np.uint8:
            add("QuantizeLinear to uint8")
    return [f"{n} {what}" for what, n in found.items()]


def fold_int32_biases(model: Any) -> int:
    """Replace each DequantizeLinear of an int32 initializer by the float initializer it computes
    (its readers read that instead); returns how many."""
    import numpy as np
    from onnx import TensorProto, numpy_helper

    constants = _constants(model)
    initializers = {t.name: t for t in model.graph.initializer}
    folded = []
    for node in model.graph.node:
        if node.op_type != "DequantizeLinear" or node.input[0] not in initializers:
            continue
        if initializers[node.input[0]].data_type != TensorProto.INT32 or node.input[1] not in constants:
            continue
        scale = numpy_helper.to_array(constants[node.input[1]]).astype(np.float64)
        value = numpy_helper.to_array(initializers[node.input[0]]).astype(np.float64) * scale
        model.graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), node.output[0]))
        folded.append(node)
    for node in folded:
        model.graph.node.remove(node)
    used = {name for n in model.graph.node for name in n.input}
    for tensor in [t for t in model.graph.initializer if t.data_type == TensorProto.INT32 and t.name not in used]:
        model.graph.initializer.remove(tensor)  # the int32 biases no node reads now
    return len(folded)


def for_tensorrt(path: Path, work_dir: Path) -> tuple[Path, str | None]:
    """The model TensorRT builds from for a Q/DQ `path`: `path` itself when it meets the rules,
    else a copy in `work_dir` with its int32 biases folded, and the note that says so. Raises
    EngineUnsupported naming what TensorRT's parser would still reject."""
    import onnx

    from farm.errors import EngineUnsupported

    model = onnx.load(str(path))
    if not problems(model):
        return path, None
    folded = fold_int32_biases(model)
    left = problems(model)
    if left:
        raise EngineUnsupported("TensorRT's ONNX parser takes Q/DQ models with int8 or fp8 Q/DQ and zero points of 0 "
                                f"only, and this one has {'; '.join(left)}: quantize it symmetrically to int8 "
                                "(quantize_static with QuantType.QInt8 and ActivationSymmetric) or with NVIDIA ModelOpt")
    out = work_dir / "model.tensorrt-qdq.onnx"
    try:
        onnx.save(model, str(out))
    except ValueError:  # beyond protobuf's 2 GB: the weights beside it
        onnx.save(model, str(out), save_as_external_data=True, location=out.name + ".data")
    return out, (f"{folded} int32 bias DequantizeLinear folded to fp32 for TensorRT "
                 "(its parser takes int8/fp8 Q/DQ only)")


def tensorrt_request(request: Any) -> tuple[Any, str | None]:
    """A TensorRT backend's build request (farm.records.BuildRequest) with the model it can parse:
    int8 and fp8 cells' Q/DQ models through `for_tensorrt`, every other cell's as it is."""
    import dataclasses

    if request.precision not in ("int8", "fp8"):
        return request, None
    path, note = for_tensorrt(Path(request.model_path), Path(request.work_dir))
    return dataclasses.replace(request, model_path=path), note
