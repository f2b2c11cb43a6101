"""Built-in models, generated as ONNX with deterministic random weights: no torch, no download.

The architectures follow torchvision's ResNet and Hugging Face's BERT closely enough to
exercise the same operators, fusions and memory traffic; the weights are random (seeded by
the model's name), so outputs are meaningless but reproducible byte for byte. Bump
ZOO_VERSION whenever a generator changes, so cached files are regenerated.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Callable

import numpy as np

ZOO_VERSION = 1
OPSET = 17
IR_VERSION = 8  # accepted by every onnxruntime >= 1.14 and by TensorRT's ONNX parser


@dataclasses.dataclass(frozen=True)
class ZooEntry:
    """A built-in model: how to make it, and what its inputs need that ONNX cannot say."""

    build: Callable[..., object]  # returns onnx.ModelProto; build(weights=False): `structure`
    description: str
    default_dims: dict[str, int] = dataclasses.field(default_factory=dict)
    input_ranges: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)


class GraphBuilder:
    """Appends nodes and seeded initializers to an ONNX graph under construction."""

    def __init__(self, name: str, weights: bool = True) -> None:
        from onnx import helper

        self.helper = helper
        self.name = name
        self.weights = weights  # False: the structure only (random tensors without data: `structure`)
        self.rng = np.random.default_rng(zlib.crc32(name.encode()))
        self.nodes: list = []
        self.initializers: list = []
        self._count = 0

    def weight(self, name: str, shape: tuple[int, ...], std: float, mean: float = 0.0) -> str:
        if not self.weights:
            return self._placeholder(name, shape)
        values = self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std) + np.float32(mean)
        return self.constant(name, values)

    def uniform(self, name: str, shape: tuple[int, ...], low: float, high: float) -> str:
        if not self.weights:
            return self._placeholder(name, shape)
        return self.constant(name, self.rng.uniform(low, high, shape).astype(np.float32))

    def _placeholder(self, name: str, shape: tuple[int, ...]) -> str:
        """A random float tensor's name, type and shape without its data (zeros where it is as small
        as those farm.layers.flops.light_model keeps whole): what counting FLOPs and bytes reads."""
        from onnx import TensorProto

        if math.prod(shape) <= 64:
            return self.constant(name, np.zeros(shape, dtype=np.float32))
        self.initializers.append(TensorProto(name=name, data_type=TensorProto.FLOAT, dims=shape))
        return name

    def constant(self, name: str, values: np.ndarray) -> str:
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(values), name))
        return name

    def node(self, op: str, inputs: list[str], name: str, outputs: int = 1, **attrs) -> str | list[str]:
        out_names = [f"{name}_out{i}" if outputs > 1 else f"{name}_out" for i in range(outputs)]
        self.nodes.append(self.helper.make_node(op, inputs, out_names, name=name, **attrs))
        return out_names if outputs > 1 else out_names[0]

    def model(self, inputs: list, outputs: list, doc: str):
        graph = self.helper.make_graph(self.nodes, self.name, inputs, outputs, self.initializers)
        model = self.helper.make_model(
            graph,
            opset_imports=[self.helper.make_opsetid("", OPSET)],
            producer_name="farm.zoo",
            producer_version=str(ZOO_VERSION),
            doc_string=doc,
        )
        model.ir_version = IR_VERSION
        return model


# --- ResNet (torchvision layout: 7x7 stem, four stages, global pool, 1000-way classifier) -------

def make_resnet(depth: int, num_classes: int = 1000, width: int = 64, image: int = 224, weights: bool = True):
    """ResNet-18/34 (basic blocks) or ResNet-50/101/152 (bottlenecks) with a dynamic batch."""
    from onnx import TensorProto, helper

    blocks, bottleneck = {
        18: ([2, 2, 2, 2], False), 34: ([3, 4, 6, 3], False),
        50: ([3, 4, 6, 3], True), 101: ([3, 4, 23, 3], True), 152: ([3, 8, 36, 3], True),
    }[depth]
    g = GraphBuilder(f"resnet{depth}", weights)

    def conv_bn(x: str, c_in: int, c_out: int, k: int, stride: int, name: str, relu: bool = True,
                gamma: float = 1.0) -> str:
        w = g.weight(f"{name}.conv.weight", (c_out, c_in, k, k), std=math.sqrt(2.0 / (c_in * k * k)))
        y = g.node("Conv", [x, w], f"{name}.conv", kernel_shape=[k, k], strides=[stride, stride],
                   pads=[k // 2] * 4)
        scale = g.uniform(f"{name}.bn.weight", (c_out,), 0.9 * gamma, 1.1 * gamma)
        bias = g.weight(f"{name}.bn.bias", (c_out,), std=0.01)
        mean = g.weight(f"{name}.bn.running_mean", (c_out,), std=0.01)
        var = g.uniform(f"{name}.bn.running_var", (c_out,), 0.9, 1.1)
        y = g.node("BatchNormalization", [y, scale, bias, mean, var], f"{name}.bn", epsilon=1e-5)
        return g.node("Relu", [y], f"{name}.relu") if relu else y

    x = conv_bn("input", 3, width, 7, 2, "stem")
    x = g.node("MaxPool", [x], "stem.maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c_in = width
    expansion = 4 if bottleneck else 1
    for stage, count in enumerate(blocks):
        planes = width * 2**stage
        for block in range(count):
            stride = 2 if stage > 0 and block == 0 else 1
            name = f"layer{stage + 1}.{block}"
            # A small last gamma keeps the residual sum bounded through 16+ random blocks,
            # as torchvision's zero_init_residual does, so fp16 variants stay in range.
            if bottleneck:
                y = conv_bn(x, c_in, planes, 1, 1, f"{name}.1")
                y = conv_bn(y, planes, planes, 3, stride, f"{name}.2")
                y = conv_bn(y, planes, planes * 4, 1, 1, f"{name}.3", relu=False, gamma=0.2)
            else:
                y = conv_bn(x, c_in, planes, 3, stride, f"{name}.1")
                y = conv_bn(y, planes, planes, 3, 1, f"{name}.2", relu=False, gamma=0.2)
            shortcut = x
            if stride != 1 or c_in != planes * expansion:
                shortcut = conv_bn(x, c_in, planes * expansion, 1, stride, f"{name}.downsample", relu=False)
            x = g.node("Relu", [g.node("Add", [y, shortcut], f"{name}.add")], f"{name}.relu")
            c_in = planes * expansion
    x = g.node("GlobalAveragePool", [x], "avgpool")
    x = g.node("Flatten", [x], "flatten", axis=1)
    w = g.weight("fc.weight", (num_classes, c_in), std=1.0 / math.sqrt(c_in))
    b = g.weight("fc.bias", (num_classes,), std=0.01)
    g.nodes.append(helper.make_node("Gemm", [x, w, b], ["logits"], name="fc", transB=1))
    return g.model(
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, image, image])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", num_classes])],
        f"ResNet-{depth} (torchvision layout), random weights seeded by name; farm zoo v{ZOO_VERSION}",
    )


# --- BERT encoder (Hugging Face BertModel layout: embeddings, N post-LN layers, pooler) ----------

def make_bert(layers: int = 12, hidden: int = 768, heads: int = 12, intermediate: int = 3072,
              vocab: int = 30522, max_positions: int = 512, name: str = "bert-base", weights: bool = True):
    """A BERT encoder with dynamic batch and sequence length."""
    from onnx import TensorProto, helper

    # The pieces are added in the order they always were: the same bytes, so the same model hash.
    g = GraphBuilder(name, weights)
    x = _bert_embeddings(g, hidden, vocab, max_positions)
    mask = _bert_attention_mask(g)
    consts = _BertConstants(g, hidden, heads)
    for i in range(layers):
        x = _bert_layer(g, x, mask, consts, intermediate, f"encoder.layer.{i}")

    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="last_hidden_state"))
    # Index [0] then Squeeze, not a scalar index: ONNX Runtime's optimizer rewrites a scalar-index
    # Gather on axis 1 into a Slice it then cannot run.
    first = g.node("Gather", [x, _int64(g, "const.zero_idx", [0])], "pooler.first_token", axis=1)
    first = g.node("Squeeze", [first, _int64(g, "const.axis1", [1])], "pooler.squeeze")
    pooled = g.node("Tanh", [_linear(g, first, hidden, hidden, "pooler.dense")], "pooler.tanh")
    g.nodes.append(helper.make_node("Identity", [pooled], ["pooler_output"], name="pooler_output"))
    ids = lambda n: helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])  # noqa: E731
    return g.model(
        [ids("input_ids"), ids("token_type_ids"), ids("attention_mask")],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", hidden]),
         helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, ["batch", hidden])],
        f"BERT encoder ({layers} layers, hidden {hidden}), random weights seeded by name; farm zoo v{ZOO_VERSION}",
    )


def _int64(g: GraphBuilder, name: str, values: list[int]) -> str:
    return g.constant(name, np.asarray(values, dtype=np.int64))


def _linear(g: GraphBuilder, x: str, c_in: int, c_out: int, name: str) -> str:
    w = g.weight(f"{name}.weight", (c_in, c_out), std=0.02)
    b = g.weight(f"{name}.bias", (c_out,), std=0.02)
    return g.node("Add", [g.node("MatMul", [x, w], f"{name}.matmul"), b], f"{name}.add")


def _layer_norm(g: GraphBuilder, x: str, hidden: int, name: str) -> str:
    scale = g.uniform(f"{name}.weight", (hidden,), 0.9, 1.1)
    bias = g.weight(f"{name}.bias", (hidden,), std=0.02)
    return g.node("LayerNormalization", [x, scale, bias], name, axis=-1, epsilon=1e-12)


def _bert_embeddings(g: GraphBuilder, hidden: int, vocab: int, max_positions: int) -> str:
    """Word + position + token type embeddings, then LayerNorm."""
    words = g.node("Gather", [g.weight("embeddings.word", (vocab, hidden), std=0.02), "input_ids"],
                   "embeddings.word_lookup")
    # Position embeddings: the first `sequence` rows of the table (broadcast over the batch).
    seq_len = g.node("Shape", ["input_ids"], "embeddings.seq_len", start=1, end=2)
    pos = g.node("Slice", [g.weight("embeddings.position", (max_positions, hidden), std=0.02),
                           _int64(g, "const.zero", [0]), seq_len, _int64(g, "const.axis0", [0])],
                 "embeddings.positions")
    types = g.node("Gather", [g.weight("embeddings.token_type", (2, hidden), std=0.02), "token_type_ids"],
                   "embeddings.token_type_lookup")
    x = g.node("Add", [g.node("Add", [words, pos], "embeddings.add_position"), types], "embeddings.add_type")
    return _layer_norm(g, x, hidden, "embeddings.layer_norm")


def _bert_attention_mask(g: GraphBuilder) -> str:
    """Additive attention mask: 0 where attended, -10000 where masked, shaped [batch, 1, 1, seq]."""
    from onnx import TensorProto

    mask = g.node("Cast", ["attention_mask"], "mask.cast", to=TensorProto.FLOAT)
    mask = g.node("Sub", [g.constant("const.onef", np.asarray(1.0, np.float32)), mask], "mask.invert")
    mask = g.node("Mul", [mask, g.constant("const.neg", np.asarray(-10000.0, np.float32))], "mask.scale")
    return g.node("Unsqueeze", [mask, _int64(g, "const.axes12", [1, 2])], "mask.unsqueeze")


class _BertConstants:
    """The constants every encoder layer shares."""

    def __init__(self, g: GraphBuilder, hidden: int, heads: int) -> None:
        self.hidden, self.head_dim = hidden, hidden // heads
        self.split_heads = _int64(g, "const.split_heads", [0, 0, heads, self.head_dim])
        self.merge_heads = _int64(g, "const.merge_heads", [0, 0, hidden])
        self.scale = g.constant("const.scale", np.asarray(1.0 / math.sqrt(self.head_dim), np.float32))
        self.half = g.constant("const.half", np.asarray(0.5, np.float32))
        self.one = g.constant("const.one_f", np.asarray(1.0, np.float32))
        self.sqrt2 = g.constant("const.sqrt2", np.asarray(math.sqrt(2.0), np.float32))


def _bert_layer(g: GraphBuilder, x: str, mask: str, c: _BertConstants, intermediate: int, p: str) -> str:
    """One encoder layer: self-attention, then the GELU feed-forward, each with residual and LayerNorm."""
    hidden = c.hidden
    q = g.node("Reshape", [_linear(g, x, hidden, hidden, f"{p}.attention.query"), c.split_heads], f"{p}.q.reshape")
    k = g.node("Reshape", [_linear(g, x, hidden, hidden, f"{p}.attention.key"), c.split_heads], f"{p}.k.reshape")
    v = g.node("Reshape", [_linear(g, x, hidden, hidden, f"{p}.attention.value"), c.split_heads], f"{p}.v.reshape")
    q = g.node("Transpose", [q], f"{p}.q.transpose", perm=[0, 2, 1, 3])
    k = g.node("Transpose", [k], f"{p}.k.transpose", perm=[0, 2, 3, 1])
    v = g.node("Transpose", [v], f"{p}.v.transpose", perm=[0, 2, 1, 3])
    scores = g.node("Mul", [g.node("MatMul", [q, k], f"{p}.scores"), c.scale], f"{p}.scores.scale")
    probs = g.node("Softmax", [g.node("Add", [scores, mask], f"{p}.scores.mask")], f"{p}.softmax", axis=-1)
    context = g.node("Transpose", [g.node("MatMul", [probs, v], f"{p}.context")], f"{p}.context.transpose",
                     perm=[0, 2, 1, 3])
    context = g.node("Reshape", [context, c.merge_heads], f"{p}.context.reshape")
    attn = _linear(g, context, hidden, hidden, f"{p}.attention.output")
    x = _layer_norm(g, g.node("Add", [attn, x], f"{p}.attention.residual"), hidden, f"{p}.attention.layer_norm")
    h = _linear(g, x, hidden, intermediate, f"{p}.intermediate")
    erf = g.node("Erf", [g.node("Div", [h, c.sqrt2], f"{p}.gelu.div")], f"{p}.gelu.erf")
    h = g.node("Mul", [g.node("Mul", [h, g.node("Add", [erf, c.one], f"{p}.gelu.add")], f"{p}.gelu.mul"), c.half],
               f"{p}.gelu.half")
    h = _linear(g, h, intermediate, hidden, f"{p}.output")
    return _layer_norm(g, g.node("Add", [h, x], f"{p}.output.residual"), hidden, f"{p}.output.layer_norm")


BERT_VOCAB = 30522

ZOO: dict[str, ZooEntry] = {
    "resnet18": ZooEntry(lambda weights=True: make_resnet(18, weights=weights),
                         "ResNet-18, 224x224 RGB, dynamic batch (11.7 M parameters)"),
    "resnet50": ZooEntry(lambda weights=True: make_resnet(50, weights=weights),
                         "ResNet-50, 224x224 RGB, dynamic batch (25.6 M parameters)"),
    "bert-base": ZooEntry(
        lambda weights=True: make_bert(weights=weights),
        "BERT-base encoder, dynamic batch and sequence (110 M parameters); sequence defaults to 128",
        default_dims={"sequence": 128},
        input_ranges={"input_ids": (0, BERT_VOCAB), "token_type_ids": (0, 2), "attention_mask": (1, 2)},
    ),
}


# sha256 of each model `build()` writes at this ZOO_VERSION (tests/test_roofline.py builds them
# and checks): a cell whose model_sha256 is here measured this generator's graph, so its FLOPs
# can be counted on `structure(name)` without generating and hashing hundreds of MiB of weights.
ZOO_SHA256: dict[tuple[str, int], str] = {
    ("resnet18", 1): "665648f933cc0ada4da65f593d20415e8120e52a0c8f941a63576d273c1d5ec1",
    ("resnet50", 1): "d95eb5fe3f343e904c5a09147cbe3274b190d978f9caf060641457f35bdbf7df",
    ("bert-base", 1): "e051a4840e4d8f2c61e522019e57201ee2f41e5dd5ee7af65dc26c4c1786a9e3",
}


def structure(name: str):
    """Zoo model `name`'s graph as `build()` makes it, every random tensor without its data: the
    same nodes, names, shapes and types (what FLOPs and bytes are counted on) in a few MiB, in a
    fraction of the time. Not a runnable model."""
    return ZOO[name].build(weights=False)
