"""TensorRT engine layers as farm sees them, whatever file or API they came from, and how they
are sized and joined to per-layer times: the one place for engine-layer logic (`farm ingest`,
the trtexec backend and the TensorRT backend all use it).

Sources: the verbose build log's "Engine Layer Information" lines (two text formats: 8.0-8.5
`name[Int8(1,3,512,768)]`, 8.6+ `name (Float[1,3:4,224,224])`) and engine-inspector JSON (10.x
`Format/Datatype`, 11.x `Datatype` + `Format`). Dimensions printed as negative numbers or -1
are dynamic: the tensor's size is unknown (None), never a number.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable

from farm.layers.memory import conv_macs, element_bytes, tensor_bytes, total_bytes

# Engine layer types that hold no weights: a layer of one of these with no weight figure has 0 weight
# bytes. Any other layer the source gives no weights for (Myelin `ForeignNode`s, cuBLAS MatMul/Gemm,
# Scale, plugins, types farm does not know) has unknown weights (None), never 0.
WEIGHTLESS_TYPES = {"Reformat", "NoOp", "Shuffle", "PointWise", "PointWiseV2", "ElementWise", "Activation",
                    "Pooling", "CudaPooling", "CaskPooling", "Softmax", "SoftMax", "CudaSoftMax", "Concatenation",
                    "Slice", "Resize", "Reduce", "Gather", "TrainStation", "Identity", "Cast", "Padding", "Unary",
                    "Select", "TopK", "Shape", "Signal", "Wait"}
_WEIGHTLESS_ENDINGS = ("Pooling", "Reformat", "SoftMax", "Softmax", "Shuffle", "Slice", "Resize", "Reduce", "Gather",
                      "Concatenation", "PointWise", "PointWiseV2")


def is_weightless(layer_type: str | None) -> bool:
    """A layer type that holds no weights (`WEIGHTLESS_TYPES`, or a kernel family of one: CudnnPooling)."""
    return bool(layer_type) and (layer_type in WEIGHTLESS_TYPES or layer_type.endswith(_WEIGHTLESS_ENDINGS))


CONVOLUTION_TYPES = {"CaskConvolution", "CudaDepthwiseConvolution", "Convolution", "CaskDeconvolution",
                     "Deconvolution", "CudnnConvolution", "CaskGemmConvolution", "CudaGroupConvolution"}


@dataclasses.dataclass
class Tensor:
    name: str
    dtype: str | None  # as TensorRT prints it: Int8, Float, Half, ...
    dims: list[int] | None  # None when any dimension is dynamic/unknown
    raw_dims: str = ""  # the dimensions exactly as printed, vector formats (3:4) included
    format: str | None = None

    @property
    def bytes(self) -> int | None:
        return tensor_bytes(self.dims, self.dtype) if self.dtype else None


@dataclasses.dataclass
class EngineLayer:
    name: str
    type: str | None = None
    tactic: str | None = None
    inputs: list[Tensor] = dataclasses.field(default_factory=list)
    outputs: list[Tensor] = dataclasses.field(default_factory=list)
    weight_bytes: int | None = None  # from inspector Weights, or filled in from ONNX conv shapes
    macs: int | None = None

    @property
    def input_bytes(self) -> int | None:
        return total_bytes(t.bytes for t in self.inputs)

    @property
    def output_bytes(self) -> int | None:
        return total_bytes(t.bytes for t in self.outputs)

    @property
    def total_bytes(self) -> int | None:
        return total_bytes([self.input_bytes, self.weight_bytes, self.output_bytes])


# --- verbose "Engine Layer Information" lines ---------------------------------------------------

_LAYER_LINE = re.compile(r"^Layer\((?P<type>[^)]*)\): (?P<name>.*?), Tactic: (?P<tactic>\S+), (?P<io>.*)$")
_TENSOR_OLD = re.compile(r"(?:^|, )(?P<name>.*?)\[(?P<dtype>\w+)\((?P<dims>[^)]*)\)\]")  # 8.0-8.5
_TENSOR_NEW = re.compile(r"(?:^|, )(?P<name>.*?) \((?P<dtype>\w+)\[(?P<dims>[^\]]*)\]\)")  # 8.6+


def parse_dims(text: str) -> list[int] | None:
    """'1,3:4,224,224' -> [1, 3, 224, 224]; any negative (dynamic) dimension -> None."""
    if not text.strip():
        return []
    dims = []
    for part in text.split(","):
        value = int(part.strip().split(":")[0])
        if value < 0:
            return None
        dims.append(value)
    return dims


def _tensors(text: str) -> list[Tensor]:
    text = text.strip()
    if not text:
        return []
    pattern = _TENSOR_NEW if _TENSOR_NEW.match(text) and not _TENSOR_OLD.match(text) else _TENSOR_OLD
    return [Tensor(m["name"].strip(), m["dtype"], parse_dims(m["dims"]), m["dims"]) for m in pattern.finditer(text)]


def LayerFromLogLine(line: str) -> EngineLayer | None:
    """One `Layer(Type): name, Tactic: t, inputs -> outputs` line (None if it is not one)."""
    match = _LAYER_LINE.match(line.strip())
    if not match:
        return None
    inputs, _, outputs = match["io"].partition(" -> ")
    return EngineLayer(match["name"], match["type"], match["tactic"], _tensors(inputs), _tensors(outputs))


def LayersFromLogText(text: str) -> list[EngineLayer]:
    """Every "Engine Layer Information" line of a verbose build log's text, in order."""
    return [layer for layer in map(LayerFromLogLine, text.splitlines()) if layer is not None]


# --- engine inspector JSON ------------------------------------------------------------------------

_FORMAT_TYPES = [("FP32", "Float"), ("FLOAT", "Float"), ("FP16", "Half"), ("HALF", "Half"), ("BF16", "BFloat16"),
                 ("INT8", "Int8"), ("FP8", "FP8"), ("INT32", "Int32"), ("INT64", "Int64"), ("BOOL", "Bool"),
                 ("UINT8", "UInt8"), ("INT4", "Int4")]


def dtype_from_format(text: str | None) -> str | None:
    """The element type named in an inspector "Format/Datatype" (or "Datatype") string."""
    if not text:
        return None
    upper = text.upper().replace(" ", "")
    for key, name in sorted(_FORMAT_TYPES, key=lambda kv: -len(kv[0])):
        if key in upper:
            return name
    return None


def LayersFromInspector(document: dict) -> list[EngineLayer]:
    """Layers of a parsed engine-inspector document (trtexec --exportLayerInfo, or TensorRT's
    `IEngineInspector` JSON per layer under "Layers"), 10.x or 11.x keys; not validated (the JSON
    file reader, `LayersFromInspectorJson`, checks a file first)."""
    layers = []
    for entry in document.get("Layers", []):
        if isinstance(entry, str):  # built without detailed profiling verbosity: names only
            layers.append(EngineLayer(entry))
            continue

        def tensors(items: Iterable[dict]) -> list[Tensor]:
            out = []
            for t in items or []:
                dtype = dtype_from_format(t.get("Datatype") or t.get("Format/Datatype"))
                dims = t.get("Dimensions") or []
                known = None if any((not isinstance(d, int)) or d < 0 for d in dims) else list(dims)
                out.append(Tensor(t.get("Name", ""), dtype, known, ",".join(map(str, dims)),
                                  t.get("Format") or t.get("Format/Datatype")))
            return out

        weights = entry.get("Weights") or {}
        weight_bytes = None
        if "Count" in weights:
            size = element_bytes(weights.get("Type", "")) or element_bytes(dtype_from_format(weights.get("Type")) or "")
            weight_bytes = int(math.ceil(weights["Count"] * size)) if size is not None else None
        elif is_weightless(entry.get("LayerType")):
            weight_bytes = 0
        layers.append(EngineLayer(entry.get("Name", ""), entry.get("LayerType"), entry.get("TacticName") or
                                  entry.get("TacticValue"), tensors(entry.get("Inputs")), tensors(entry.get("Outputs")),
                                  weight_bytes))
    return layers


# --- weights from the ONNX parser's lines ---------------------------------------------------------

def member_nodes(layer_name: str) -> list[str]:
    """ONNX node names a fused layer is made of: split ' || ' and ' + ', unwrap PWN(...)."""
    names = []
    for part in re.split(r" \|\| | \+ ", layer_name):
        part = part.strip()
        while part.startswith("PWN(") and part.endswith(")"):
            part = part[4:-1]
        names.extend(p.strip() for p in re.split(r" \+ |, ", part) if p.strip())
    return names


def fill_weights(layers: list[EngineLayer], conv_weight_shapes: dict[str, list[int]],
                 weight_shapes: dict[str, list[list[int]]] | None = None) -> None:
    """Weights and MACs of convolution layers from the ONNX kernel shapes (K, C/G, R, S) that the
    parser logged, and weights of MatMul/Gemm layers from the shapes of their initializer inputs
    (`weight_shapes`; Gemm's bias left out, as the engine explorer does), in the layer's input type;
    layers of a weightless type get 0; the rest stay unknown (None)."""
    weight_shapes = weight_shapes or {}
    for layer in layers:
        if layer.weight_bytes is not None:
            continue
        members = member_nodes(layer.name)
        shapes = [conv_weight_shapes[n] for n in members if n in conv_weight_shapes]
        other = [shape for n in members for shape in weight_shapes.get(n, [])]
        is_conv = layer.type in CONVOLUTION_TYPES
        dtype = layer.inputs[0].dtype if layer.inputs else None
        size = element_bytes(dtype) if dtype else None
        if not shapes:
            if other and size is not None:
                layer.weight_bytes = int(sum(math.prod(s) for s in other) * size)
            elif is_weightless(layer.type) and not is_conv:
                layer.weight_bytes = 0
            continue
        layer.weight_bytes = None if size is None else int(sum(math.prod(s) for s in shapes + other) * size)
        if layer.outputs and len(shapes) == len(layer.outputs):
            macs = [conv_macs(out.dims, shape) for out, shape in zip(layer.outputs, shapes)]
            layer.macs = None if any(m is None for m in macs) else sum(macs)
        elif len(shapes) == 1 and layer.outputs:
            layer.macs = conv_macs(layer.outputs[0].dims, shapes[0])


# --- joining layer information to per-layer times -------------------------------------------------

# ONNX Runtime's CPU provider renames a node it runs in fp32 inside an fp16 model (its cast
# insertion): `InsertedPrecisionFreeCast_<node>` is the fp32 model's `<node>`
ORT_CAST_PREFIX = "InsertedPrecisionFreeCast_"


def join_key(name: str) -> str:
    """The name layers of two cells are joined by: TensorRT's renamings undone (PWN(...) wrappers,
    profile suffixes), and ONNX Runtime's cast-insertion prefix."""
    key = re.sub(r" \[profile \d+\]$", "", name.strip()).removeprefix(ORT_CAST_PREFIX)
    while True:
        unwrapped = re.sub(r"PWN\(([^()]*(?:\([^()]*\))?[^()]*)\)", r"\1", key)
        if unwrapped == key:
            return key
        key = unwrapped


def join_layers(layers: list[EngineLayer], timed_names: list[str]) -> tuple[dict[str, int], list[str], list[str]]:
    """Match profile rows to engine layers: exact names first, then names with renamings undone.

    Returns (profile name -> layer index, profile names without a layer, layer names without a row).
    """
    by_name = {layer.name: i for i, layer in enumerate(layers)}
    by_key: dict[str, int] = {}
    for i, layer in enumerate(layers):
        by_key.setdefault(join_key(layer.name), i)
    matched: dict[str, int] = {}
    for name in timed_names:
        if name in by_name:
            matched[name] = by_name[name]
        elif join_key(name) in by_key:
            matched[name] = by_key[join_key(name)]
    used = set(matched.values())
    return (matched, [n for n in timed_names if n not in matched],
            [layer.name for i, layer in enumerate(layers) if i not in used])
