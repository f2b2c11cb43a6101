"""Small ONNX models with the structures that broke precision transforms on real third-party models.

- `big_variance_bn`: a BatchNormalization whose running variance (9.8e7) is beyond fp16's range
  (65504), as in a text detector; clamping it (onnxconverter-common clamps to 1e4 by default)
  scales the channel by sqrt(9.8e7 / 1e4) ~ 99.
- `if_model`: an `If` whose branches read the outer graph's tensors and have their own
  initializers, as exported detection and NLP models have.
- `state_model`: a recurrent step with a state input and output (h -> h_new).
- `elementwise_model`: nothing that int8 quantization quantizes.
- `big_activation_model`: no weight beyond fp16's range, but an activation beyond it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _save(model, path: Path) -> Path:
    import onnx

    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path


def big_variance_bn(path: Path, variance: float = 9.8e7) -> Path:
    """x[N,3,16,16] -> Conv(3->8) -> BatchNormalization(variance up to `variance`) -> Relu -> Conv(8->4)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    channels = 8
    var = np.geomspace(1e5, variance, channels).astype(np.float32)
    init = [
        numpy_helper.from_array(rng.normal(0, 300, (channels, 3, 3, 3)).astype(np.float32), "conv1.w"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, channels).astype(np.float32), "bn.scale"),
        numpy_helper.from_array(rng.uniform(-0.1, 0.1, channels).astype(np.float32), "bn.bias"),
        numpy_helper.from_array(rng.uniform(-100, 100, channels).astype(np.float32), "bn.mean"),
        numpy_helper.from_array(var, "bn.var"),
        numpy_helper.from_array(rng.normal(0, 0.3, (4, channels, 3, 3)).astype(np.float32), "conv2.w"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv1.w"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["b"],
                         name="bn", epsilon=1e-5),
        helper.make_node("Relu", ["b"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "conv2.w"], ["y"], name="conv2", pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(nodes, "big_variance_bn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 16, 16])], init)
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def if_model(path: Path, top_matmul: bool = True) -> Path:
    """x[N,16] -> (MatMul ->) Softmax -> p; If(N > 1): then Softmax(MatMul(p, Wt) + bt + x),
    else Softmax(MatMul(p, We) * 0.5 + x) -> y[N,16], as a detector's post-processing `If` does.

    The branches read the outer tensors `p` (made by a node the fp16 transform keeps in fp32) and
    `x` (a graph input), and have their own initializers; the condition depends on the input's
    shape only. With `top_matmul` false, every MatMul is inside a branch (what int8 quantization
    never reaches)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)

    def branch(name: str, weight: str, op: str, constant: str) -> object:
        init = [numpy_helper.from_array(rng.normal(0, 1.0, (16, 16)).astype(np.float32), weight),
                numpy_helper.from_array(rng.normal(0, 0.1, 16).astype(np.float32) if op == "Add"
                                        else np.array(0.5, np.float32), constant)]
        nodes = [helper.make_node("MatMul", ["p", weight], [f"{name}_mm"], name=f"{name}_matmul"),
                 helper.make_node(op, [f"{name}_mm", constant], [f"{name}_op"], name=f"{name}_{op.lower()}"),
                 helper.make_node("Add", [f"{name}_op", "x"], [f"{name}_res"], name=f"{name}_residual"),
                 helper.make_node("Softmax", [f"{name}_res"], [f"{name}_out"], name=f"{name}_softmax", axis=-1)]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT,
                                                                                  ["batch", 16])], init)

    init = [numpy_helper.from_array(rng.normal(0, 1.0, (16, 16)).astype(np.float32), "w0"),
            numpy_helper.from_array(np.array([0], np.int64), "axis0"),
            numpy_helper.from_array(np.array([1], np.int64), "one")]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h"], name="matmul0") if top_matmul
             else helper.make_node("Relu", ["x"], ["h"], name="relu0"),
             helper.make_node("Softmax", ["h"], ["p"], name="softmax0", axis=-1),
             helper.make_node("Shape", ["x"], ["shape"], name="shape"),
             helper.make_node("Gather", ["shape", "axis0"], ["n"], name="gather", axis=0),
             helper.make_node("Greater", ["n", "one"], ["cond1"], name="greater"),
             helper.make_node("Squeeze", ["cond1", "axis0"], ["cond"], name="squeeze"),
             helper.make_node("If", ["cond"], ["y"], name="if",
                              then_branch=branch("then", "wt", "Add", "bt"),
                              else_branch=branch("else", "we", "Mul", "half"))]
    graph = helper.make_graph(nodes, "if_model", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])],
                              init if top_matmul else init[1:])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def state_model(path: Path) -> Path:
    """A recurrent step: (x[N,32], h[N,64]) -> (y[N,16], h_new = tanh(x Wx + h Wh + b))."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    init = [numpy_helper.from_array(rng.normal(0, 0.2, (32, 64)).astype(np.float32), "wx"),
            numpy_helper.from_array(rng.normal(0, 0.1, (64, 64)).astype(np.float32), "wh"),
            numpy_helper.from_array(rng.normal(0, 0.1, 64).astype(np.float32), "b"),
            numpy_helper.from_array(rng.normal(0, 0.2, (64, 16)).astype(np.float32), "wy")]
    nodes = [helper.make_node("MatMul", ["x", "wx"], ["xw"], name="mm_x"),
             helper.make_node("MatMul", ["h", "wh"], ["hw"], name="mm_h"),
             helper.make_node("Add", ["xw", "hw"], ["s0"], name="add0"),
             helper.make_node("Add", ["s0", "b"], ["s1"], name="add1"),
             helper.make_node("Tanh", ["s1"], ["h_new"], name="tanh"),
             helper.make_node("MatMul", ["h_new", "wy"], ["y"], name="mm_y")]
    graph = helper.make_graph(nodes, "state_model",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32]),
                               helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16]),
                               helper.make_tensor_value_info("h_new", TensorProto.FLOAT, ["batch", 64])], init)
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def elementwise_model(path: Path) -> Path:
    """x[N,16] -> Abs -> Neg -> Sqrt(Abs) -> y: nothing int8 quantization has a quantized form for."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Abs", ["x"], ["a"], name="abs"),
             helper.make_node("Neg", ["a"], ["n"], name="neg"),
             helper.make_node("Abs", ["n"], ["a2"], name="abs2"),
             helper.make_node("Sqrt", ["a2"], ["y"], name="sqrt")]
    graph = helper.make_graph(nodes, "elementwise",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def big_activation_model(path: Path) -> Path:
    """x[N,16] -> MatMul(W) -> * 300 -> * 300 (beyond fp16's range: up to ~5e5) -> * 1e-4 -> y:
    no weight beyond fp16's range, one activation beyond it."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(6)
    init = [numpy_helper.from_array(rng.normal(0, 1.0, (16, 16)).astype(np.float32), "w"),
            numpy_helper.from_array(np.array(300.0, np.float32), "k"),
            numpy_helper.from_array(np.array(1e-4, np.float32), "small")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
             helper.make_node("Mul", ["m", "k"], ["a"], name="scale1"),
             helper.make_node("Mul", ["a", "k"], ["b"], name="scale2"),
             helper.make_node("Mul", ["b", "small"], ["y"], name="shrink")]
    graph = helper.make_graph(nodes, "big_activation",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])], init)
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def plugin_model(path: Path) -> Path:
    """x[N,16] -> MatMul -> MyPlugin (domain trt.plugins: a TensorRT plugin ONNX Runtime lacks) -> y."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
             helper.make_node("MyPlugin", ["m"], ["y"], name="plugin", domain="trt.plugins")]
    graph = helper.make_graph(nodes, "plugin", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])],
                              [numpy_helper.from_array(rng.normal(0, 1, (16, 16)).astype(np.float32), "w")])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                         helper.make_opsetid("trt.plugins", 1)]), path)


def output_in_value_info_model(path: Path) -> Path:
    """x[N,16] -> MatMul -> Softmax -> y, with `y` declared in value_info as well as an output (as
    Paddle's exporter writes it: a document orientation classifier)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(8)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
             helper.make_node("Softmax", ["m"], ["y"], name="softmax", axis=-1)]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])
    graph = helper.make_graph(nodes, "value_info", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [y], [numpy_helper.from_array(rng.normal(0, 1, (16, 16)).astype(np.float32), "w")],
                              value_info=[helper.make_tensor_value_info("m", TensorProto.FLOAT, ["batch", 16]), y])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def weights_as_inputs_model(path: Path) -> Path:
    """x[N,16] -> MatMul(w) -> Relu -> y, with `w` listed among the graph inputs as well as an
    initializer (what ONNX before IR 4 required: ONNX's own ImageNet test models)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(9)
    w = numpy_helper.from_array(rng.normal(0, 1, (16, 16)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
             helper.make_node("Relu", ["m"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "weights_as_inputs",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16]),
                               helper.make_tensor_value_info("w", TensorProto.FLOAT, [16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])], [w])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def inputs_read_in_branches_model(path: Path) -> Path:
    """x[N,16], state[N,16]; If(N > 1): then MatMul(x, Wt) + state, else MatMul(x, We) * state -> y:
    the float inputs are read by the branches only, as a voice-activity model's audio and state."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(10)

    def branch(name: str, op: str) -> object:
        nodes = [helper.make_node("MatMul", ["x", f"w_{name}"], [f"{name}_mm"], name=f"{name}_matmul"),
                 helper.make_node(op, [f"{name}_mm", "state"], [f"{name}_out"], name=f"{name}_{op.lower()}")]
        weight = numpy_helper.from_array(rng.normal(0, 0.5, (16, 16)).astype(np.float32), f"w_{name}")
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT,
                                                                                  ["batch", 16])], [weight])

    init = [numpy_helper.from_array(np.array([0], np.int64), "axis0"),
            numpy_helper.from_array(np.array([1], np.int64), "one")]
    nodes = [helper.make_node("Shape", ["x"], ["shape"], name="shape"),
             helper.make_node("Gather", ["shape", "axis0"], ["n"], name="gather", axis=0),
             helper.make_node("Greater", ["n", "one"], ["cond1"], name="greater"),
             helper.make_node("Squeeze", ["cond1", "axis0"], ["cond"], name="squeeze"),
             helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch("then", "Add"),
                              else_branch=branch("else", "Mul"))]
    graph = helper.make_graph(nodes, "inputs_in_branches",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 16]) for n in ("x", "state")],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])], init)
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def dynamic_quantized_model(path: Path) -> Path:
    """x[N,16] -> MatMul -> DynamicQuantizeLinear -> MatMulInteger(w int8) -> Cast -> Mul(scale) -> y:
    a dynamically quantized matrix product, whose quantizer takes fp32 only (an OCR model's CRNN)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(11)
    init = [numpy_helper.from_array(rng.normal(0, 1, (16, 16)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.integers(0, 255, (16, 16)).astype(np.uint8), "wq"),
            numpy_helper.from_array(np.array(0.01, np.float32), "wscale")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
             helper.make_node("DynamicQuantizeLinear", ["m"], ["mq", "mscale", "mzero"], name="quantize"),
             helper.make_node("MatMulInteger", ["mq", "wq", "mzero"], ["acc"], name="matmul_integer"),
             helper.make_node("Cast", ["acc"], ["accf"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["mscale", "wscale"], ["scale"], name="scales"),
             helper.make_node("Mul", ["accf", "scale"], ["y"], name="dequantize")]
    graph = helper.make_graph(nodes, "dynamic_quantized",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])], init)
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def default_fill_model(path: Path) -> Path:
    """x[N,16] -> Shape -> ConstantOfShape (no `value`: fp32 zeros by default) -> Add(MatMul(x)) -> y:
    torch.onnx's export of `new_zeros` (swin's attention mask)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(12)
    nodes = [helper.make_node("Shape", ["x"], ["shape"], name="shape"),
             helper.make_node("ConstantOfShape", ["shape"], ["zeros"], name="zeros"),
             helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
             helper.make_node("Add", ["m", "zeros"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "default_fill", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])],
                              [numpy_helper.from_array(rng.normal(0, 1, (16, 16)).astype(np.float32), "w")])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def quantized_conv_models(folder: Path) -> tuple[Path, Path]:
    """Two dynamically quantized convolutions (a quantized OCR model's CRNN): ONNX Runtime's own
    `quantize_dynamic` of Conv(bias) -> Relu (its int32 accumulator -> Cast -> Mul(scales)), and the
    older quantizer's form, which quantizes the bias too: Div(bias, x_scale * w_scale) -> Floor ->
    Cast(int32) -> Add to the accumulator -> Cast -> Mul(scales)."""
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(13)
    weights = rng.normal(0, 0.5, (8, 3, 3, 3)).astype(np.float32)
    bias = rng.normal(0, 50, (8,)).astype(np.float32)
    image = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 16, 16])
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8, 16, 16])
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    fp32 = _save(helper.make_model(helper.make_graph(nodes, "conv", [image], [output], [
        numpy_helper.from_array(weights, "w"), numpy_helper.from_array(bias, "b")]),
        opset_imports=[helper.make_opsetid("", 17)]), folder / "conv.onnx")
    quantize_dynamic(str(fp32), str(folder / "quantized.onnx"), weight_type=QuantType.QUInt8)

    scale = float(np.abs(weights).max() / 127)
    init = [numpy_helper.from_array(np.clip(np.round(weights / scale), -127, 127).astype(np.int8), "wq"),
            numpy_helper.from_array(np.array(scale, np.float32), "w_scale"),
            numpy_helper.from_array(bias, "b"), numpy_helper.from_array(np.array([1, 8, 1, 1], np.int64), "bias_shape")]
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "x_scale", "x_zero"], name="quantize"),
             helper.make_node("ConvInteger", ["xq", "wq", "x_zero"], ["acc"], name="conv_integer", pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["x_scale", "w_scale"], ["scales"], name="scales"),
             helper.make_node("Div", ["b", "scales"], ["bias_quotient"], name="bias_quotient"),
             helper.make_node("Floor", ["bias_quotient"], ["bias_rounded"], name="bias_rounded"),
             helper.make_node("Cast", ["bias_rounded"], ["bias_int"], name="bias_int", to=TensorProto.INT32),
             helper.make_node("Reshape", ["bias_int", "bias_shape"], ["bias_4d"], name="bias_4d"),
             helper.make_node("Add", ["acc", "bias_4d"], ["acc_bias"], name="bias_add"),
             helper.make_node("Cast", ["acc_bias"], ["acc_float"], name="acc_float", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["acc_float", "scales"], ["c"], name="dequantize"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    older = _save(helper.make_model(helper.make_graph(nodes, "quantized_bias", [image], [output], init),
                                    opset_imports=[helper.make_opsetid("", 17)]), folder / "quantized_bias.onnx")
    return folder / "quantized.onnx", older
