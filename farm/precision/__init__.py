"""Precision as an ONNX-to-ONNX step, shared by the backends that read precision from the model
(ONNX Runtime, TensorRT's strongly typed networks, trtexec).

- fp16: onnxconverter-common's float16 conversion, keeping numerically sensitive operators,
  every node that reads a value beyond fp16's range (weights, and activations of a seeded run of
  the fp32 model) and (by default) the model's inputs and outputs in fp32.
- int8: explicit quantization with ONNX Runtime's `quantize_static`, Q/DQ format, symmetric
  activations and weights (the form TensorRT's parser accepts), calibrated on the data the sweep
  file names or, when it names none, on seeded synthetic data, which the results then say.

Transforms are checked, not trusted (farm.precision.checks): every output passes onnx.checker's
full check and loads in ONNX Runtime, and what changed is counted, subgraphs included. An
invalid output, or one where nothing changed, raises TransformUnsupported (the cell is
`unsupported`, never stored under a precision it did not get).
Results are cached by a hash of everything that changes them (model bytes, precision, options,
calibration data), so a second sweep does not recalibrate. Why these libraries: docs/precision.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import heapq
import json
import shutil
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from farm.errors import ConfigError, UserError
from farm.files import write_atomic
from farm.records import Calibration  # moved to farm.records
from farm.precision.checks import (FP16_MAX, TransformUnsupported, census, graphs, nodes, one_line, short_error,
                                   verify)

__all__ = ["TRANSFORMS", "Calibration", "Transformed", "TransformUnsupported", "calibration_batches", "transform"]

TRANSFORM_VERSION = 3
TRANSFORMS = ("fp16", "int8")
# Kept in fp32 by the fp16 conversion (besides onnxconverter-common's own list): reductions and
# normalisations whose range or accumulated error fp16 does not hold.
SENSITIVE_OPS = ["LayerNormalization", "Softmax", "ReduceMean", "ReduceSum", "Pow", "Exp", "Log", "Erf", "Sqrt"]
SUBGRAPH_OPS = ("If", "Loop", "Scan")
WEIGHTED_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")  # int8's gains: a model with any gets int8 weights


@dataclasses.dataclass
class Transformed:
    path: Path
    seconds: float  # time of the transform, 0 when it came from the cache
    cached: bool
    calibration: str | None
    summary: str = ""  # one line: what the transform did (builds.transform_summary)
    counts: dict[str, int] = dataclasses.field(default_factory=dict)  # builds.transform_<name>
    tool: str = ""  # the library and its version (builds.transform_tool)
    onnxruntime_cpu: str | None = None  # how ONNX Runtime's CPU EP runs it (fp32 kernels between Casts...)


def transform(model_path: Path, model_sha256: str, precision: str, inputs, shapes: dict[str, tuple[int, ...]],
              calibration: Calibration, keep_io_types: bool, cache_dir: Path, seed: int) -> Transformed:
    """The model converted to `precision` (cached by content hash), checked; raises
    TransformUnsupported when the output is invalid or nothing was converted."""
    calibration_hash = _calibration_hash(calibration, inputs, shapes, seed) if precision == "int8" else None
    key = hashlib.sha256(json.dumps({
        "model": model_sha256, "precision": precision, "keep_io_types": keep_io_types,
        "calibration": calibration_hash, "version": TRANSFORM_VERSION, "sensitive": SENSITIVE_OPS,
        # fp16: the seeded run that finds activations beyond fp16's range
        "probe": [seed, sorted(_probe_shapes(inputs, shapes).items())] if precision == "fp16" else None,
    }, sort_keys=True).encode()).hexdigest()[:24]
    path = cache_dir / "precision" / f"{key}.{precision}.onnx"
    report_path = path.with_suffix(".json")
    described = calibration.describe() if precision == "int8" else None
    if report_path.is_file():
        with contextlib.suppress(OSError, ValueError):
            report = json.loads(report_path.read_text())
            if "unsupported" in report:  # the same model, the same transform: the same verdict
                raise TransformUnsupported(report["unsupported"], report.get("detail", ""))
            if path.is_file():
                return Transformed(path, 0.0, True, described, **report)
    from farm.warehouse import TEMP_DIR_NAME

    temp_area = cache_dir / TEMP_DIR_NAME  # emptied by the next sweep if this one is killed
    start = time.perf_counter()
    done: dict[str, Any] = {}

    def transform(tmp: Path) -> None:  # checked in its temporary file, renamed into place only if good
        if precision == "fp16":
            report = _fp16(model_path, tmp, keep_io_types, inputs, shapes, seed)
        elif precision == "int8":
            report = _int8(model_path, tmp, calibration_batches(calibration, inputs, shapes, seed), temp_area)
        else:
            raise ValueError(f"no ONNX transform for {precision}")
        done["seconds"] = time.perf_counter() - start
        report["onnxruntime_cpu"], skipped = verify(tmp, _label(precision), temp_area, model_path,
                                                    quantized=precision == "int8")
        report["summary"] += skipped
        done["report"] = report

    try:
        write_atomic(path, transform, tmp_dir=temp_area, make_parents=True)
        _write_json(report_path, done["report"], temp_area)
    except TransformUnsupported as exc:
        with contextlib.suppress(UserError):  # the verdict stands even where it cannot be cached
            if exc.cacheable:
                _write_json(report_path, {"unsupported": exc.reason, "detail": exc.detail}, temp_area)
        raise
    return Transformed(path, done["seconds"], False, described, **done["report"])


def _write_json(path: Path, report: dict, temp_area: Path) -> None:
    write_atomic(path, json.dumps(report, sort_keys=True), tmp_dir=temp_area)


def _label(precision: str) -> str:
    """The transform, named in every reason: its precision, library and version."""
    from importlib.metadata import version

    if precision == "fp16":
        return f"fp16 transform (onnxconverter-common {version('onnxconverter-common')})"
    return f"int8 transform (onnxruntime.quantization {version('onnxruntime')})"


# --- fp16 -----------------------------------------------------------------------------------------

def _fp16(model_path: Path, output: Path, keep_io_types: bool, inputs, shapes, seed: int) -> dict:
    import onnx
    from onnx import TensorProto
    from onnxconverter_common import float16

    label = _label("fp16")
    model = onnx.load(str(model_path))
    _name_nodes(model)
    before = census(model)
    out_of_range = _weights_out_of_range(model)
    unchecked = ""
    try:
        out_of_range |= _activations_out_of_range(model, inputs, shapes, seed)
    except Exception as exc:  # e.g. beyond 2 GB, or a model ORT cannot run: the measurement says so later
        unchecked = f"; activation ranges not checked (running the fp32 model: {short_error(exc)})"
    blocked_ops = sorted(set(float16.DEFAULT_OP_BLOCK_LIST) | set(SENSITIVE_OPS))
    _unshare_initializers(model, set(blocked_ops), out_of_range)
    try:
        # max_finite_val: nothing is clamped below fp16's own range (the default clamps to 1e4);
        # what lies beyond it stays fp32 (node_block_list).
        converted = float16.convert_float_to_float16(
            model, keep_io_types=keep_io_types, op_block_list=blocked_ops, node_block_list=sorted(out_of_range),
            max_finite_val=FP16_MAX)
    except Exception as exc:
        raise TransformUnsupported(one_line(f"{label} failed: {type(exc).__name__}: {exc}"),
                                   f"{label} failed:\n{exc}") from exc
    _outputs_read_inside(converted, set(blocked_ops), out_of_range)
    _sort_graphs(_consistent_casts(converted))
    after = census(converted)
    weights = after.weights[TensorProto.FLOAT16] - before.weights[TensorProto.FLOAT16]
    activations = after.values[TensorProto.FLOAT16] - before.values[TensorProto.FLOAT16]
    if weights <= 0 and activations <= 0:
        raise TransformUnsupported(
            f"{label} changed nothing: no float tensor was converted to fp16 "
            f"({before.weights[TensorProto.FLOAT]} fp32 weights, {before.nodes} nodes)")
    blocked = set(blocked_ops)
    kept_ops = sum(1 for n in nodes(model.graph) if n.op_type in blocked and n.name not in out_of_range)
    kept_range = sum(1 for n in nodes(model.graph) if n.name in out_of_range)
    onnx.save(converted, str(output))
    summary = (f"fp16: {weights} weights and {activations} activations converted, "
               f"{kept_ops + kept_range} nodes kept fp32 ({kept_range} for values beyond fp16's range, "
               f"{kept_ops} numerically sensitive), {after.subgraphs} subgraphs"
               f"{' converted too' if after.subgraphs else ''}{unchecked}")
    return {"summary": summary, "tool": label.split("(")[1].rstrip(")"), "counts": {
        "tensors_fp16": weights + activations, "nodes_kept_fp32": kept_ops + kept_range,
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


def _activations_out_of_range(model, inputs, shapes, seed: int) -> set[str]:
    """Nodes of the main graph that make or read a float activation beyond fp16's range on the
    cell's seeded inputs (what ModelOpt's AutoCast calls its data-max rule)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto

    from farm.models import make_feeds

    inferred = onnx.shape_inference.infer_shapes(model)
    floats = {v.name: v for v in inferred.graph.value_info if v.type.tensor_type.elem_type == TensorProto.FLOAT}
    probe = onnx.ModelProto()
    probe.CopyFrom(inferred)
    shapes = _probe_shapes(inputs, shapes)
    declared = {o.name for o in probe.graph.output}
    probe.graph.output.extend(v for name, v in floats.items() if name not in declared)
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    values = session.run(None, make_feeds(inputs, shapes, seed))
    beyond = {name for name, value in zip(names, values)
              if isinstance(value, np.ndarray) and value.dtype == np.float32 and value.size
              and float(np.abs(value[np.isfinite(value)]).max(initial=0.0)) > FP16_MAX}
    return {n.name for n in model.graph.node if beyond & {*n.input, *n.output}}


def _probe_shapes(inputs, shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The shapes of the activation-range run: every activation is kept at once, so one sample
    where the batch axis is dynamic."""
    return {spec.name: tuple(1 if axis == spec.batch_axis and isinstance(spec.shape[axis], str) else size
                             for axis, size in enumerate(shapes[spec.name])) for spec in inputs}


def _outer_names(node) -> set[str]:
    """Names a node's subgraphs read from the enclosing scopes (the node's implicit inputs)."""
    outer: set[str] = set()
    for attribute in node.attribute:
        for graph in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
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


# --- int8 -----------------------------------------------------------------------------------------

def _int8(model_path: Path, output: Path, batches: list[dict[str, np.ndarray]], temp_area: Path) -> dict:
    import onnx

    label = _label("int8")
    _quantize(model_path, output, batches, temp_area)
    before, after = census(onnx.load(str(model_path))), census(onnx.load(str(output)))
    inside = (f"; {before.subgraph_nodes} of its {before.nodes} nodes are inside If/Loop/Scan subgraphs, "
              "which quantize_static does not enter") if before.subgraph_nodes else ""
    weighted = sum(before.ops[op] for op in WEIGHTED_OPS)
    if not after.quantized_nodes or (weighted and not after.quantized_weights):
        ops = ", ".join(sorted(op for op in before.ops if op not in SUBGRAPH_OPS)[:8])
        why = inside or f"; none of its operators ({ops}) has a quantized form in quantize_static"
        what = "nothing was quantized" if not after.quantized_nodes else (
            f"nothing was quantized: none of its {weighted} Conv/MatMul/Gemm nodes got int8 weights")
        raise TransformUnsupported(one_line(f"{label}: {what} ({after.qdq_pairs} Q/DQ pairs, "
                                            f"{after.quantized_nodes} quantized nodes){why}"))
    summary = (f"int8: {after.qdq_pairs} Q/DQ pairs, {after.quantized_weights} quantized weights, "
               f"{after.quantized_nodes} quantized nodes"
               + (f"; {before.subgraph_nodes} nodes in {before.subgraphs} subgraphs left fp32 "
                  "(quantize_static does not enter subgraphs)" if before.subgraph_nodes else ""))
    return {"summary": summary, "tool": label.split("(")[1].rstrip(")"), "counts": {
        "tensors_fp16": 0, "nodes_kept_fp32": before.subgraph_nodes, "nodes_kept_fp32_range": 0,
        "subgraphs": before.subgraphs, "qdq_pairs": after.qdq_pairs, "quantized_nodes": after.quantized_nodes}}


def _quantize(model_path: Path, output: Path, batches: list[dict[str, np.ndarray]], temp_area: Path) -> None:
    """ONNX Runtime's static Q/DQ quantization, its temporary files (the model with shapes
    inferred, the augmented calibration model: easily tens of MB) in a folder of the warehouse's
    temp area that is removed afterwards, whatever happens, instead of the system's temp folder."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(batches)

        def get_next(self):
            return next(self.items, None)

    folder = Path(tempfile.mkdtemp(prefix="quantize.", dir=temp_area))
    saved = tempfile.tempdir
    tempfile.tempdir = str(folder)  # quantize_static's TemporaryDirectory()s land here
    try:
        # A ModelProto, not the path: given a path, the quantizer writes `<model>-inferred.onnx`
        # beside the model (the user's folder); given a model, into its temporary folder.
        quantize_static(onnx.load(str(model_path)), str(output), Reader(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    finally:
        tempfile.tempdir = saved
        shutil.rmtree(folder, ignore_errors=True)


def calibration_batches(calibration: Calibration, inputs, shapes: dict[str, tuple[int, ...]],
                        seed: int) -> list[dict[str, np.ndarray]]:
    """Calibration feeds, one dict per batch, checked against the model's inputs."""
    if calibration.data:
        arrays = _load_arrays(Path(calibration.base_dir) / calibration.data, inputs)
    elif calibration.images:
        arrays = _load_images(Path(calibration.base_dir) / calibration.images, calibration, inputs, shapes)
    else:
        from farm.models import make_feeds

        return [make_feeds(inputs, shapes, seed + 1000 + i) for i in range(calibration.samples)]
    for spec in inputs:
        array = arrays.get(spec.name)
        expected = shapes[spec.name][1:]
        if array is None:
            raise ConfigError(f"{calibration.data or calibration.images}: no calibration data for input "
                              f"{spec.name!r}; found: {', '.join(arrays) or 'nothing'}")
        if tuple(array.shape[1:]) != tuple(expected):
            raise ConfigError(f"{calibration.data or calibration.images}: calibration data for {spec.name!r} has "
                              f"shape {tuple(array.shape)}, the model needs (N, {', '.join(map(str, expected))})")
        if np.dtype(array.dtype).kind != np.dtype(spec.dtype).kind:
            raise ConfigError(f"{calibration.data or calibration.images}: calibration data for {spec.name!r} is "
                              f"{array.dtype}, the model's input is {spec.dtype}")
    count = min(len(a) for a in arrays.values())
    batch = shapes[inputs[0].name][0]
    return [{spec.name: arrays[spec.name][i:i + batch].astype(spec.dtype) for spec in inputs}
            for i in range(0, max(count - batch + 1, 1), batch)][:calibration.samples]


def _load_arrays(path: Path, inputs) -> dict[str, np.ndarray]:
    if path.is_file():
        try:
            with np.load(path) as npz:
                return {k: npz[k] for k in npz.files}
        except Exception as exc:
            raise ConfigError(f"{path}: cannot read calibration data as .npz: {exc}") from None
    if path.is_dir():
        files = sorted(path.glob("*.npy"))
        if not files:
            raise ConfigError(f"{path}: no .npy files in the calibration folder")
        stacked = []
        for file in files:
            try:
                stacked.append(np.load(file))
            except Exception as exc:
                raise ConfigError(f"{file}: cannot read calibration array: {exc}") from None
        if len(inputs) != 1:
            raise ConfigError(f"{path}: a folder of .npy files calibrates a single-input model; use an .npz "
                              "with one array per input name")
        return {inputs[0].name: np.stack(stacked)}
    raise ConfigError(f"{path}: no such calibration file or folder")


def _load_images(folder: Path, calibration: Calibration, inputs, shapes) -> dict[str, np.ndarray]:
    from PIL import Image, UnidentifiedImageError

    if not folder.is_dir():
        raise ConfigError(f"{folder}: no such image folder")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png", ".bmp", ".webp"))
    if not files:
        raise ConfigError(f"{folder}: no images (.jpg, .jpeg, .png, .bmp, .webp) in the calibration folder")
    spec = inputs[0]
    _, channels, height, width = shapes[spec.name]
    size = calibration.size or (height, width)
    images = []
    for file in files[:calibration.samples * shapes[spec.name][0]]:
        try:
            with Image.open(file) as image:
                pixels = np.asarray(image.convert("RGB").resize((size[1], size[0])), dtype=np.float32) / 255.0
        except (UnidentifiedImageError, OSError) as exc:
            raise ConfigError(f"{file}: cannot read the image: {exc}") from None
        pixels = (pixels - np.asarray(calibration.mean, np.float32)) / np.asarray(calibration.std, np.float32)
        images.append(pixels.transpose(2, 0, 1))
    return {spec.name: np.stack(images).astype(np.float32)}


def _calibration_hash(calibration: Calibration, inputs, shapes, seed: int) -> str:
    digest = hashlib.sha256(json.dumps({k: v for k, v in dataclasses.asdict(calibration).items()
                                        if k != "base_dir"}, sort_keys=True).encode())
    digest.update(str(seed).encode())
    for root in (calibration.data, calibration.images):
        if root:
            path = Path(calibration.base_dir) / root
            files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []
            for file in files:
                digest.update(file.name.encode())
                digest.update(zlib.crc32(file.read_bytes()).to_bytes(4, "little"))
    digest.update(json.dumps({k: list(v) for k, v in shapes.items()}, sort_keys=True).encode())
    return digest.hexdigest()
