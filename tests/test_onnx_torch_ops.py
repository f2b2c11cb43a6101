"""The interpreter's detection/OCR/audio operators against ONNX Runtime, one tiny model each."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from farm.onnx_torch import build_module  # noqa: E402

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs], list(initializers))
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    proto.ir_version = 8
    return proto


def check(proto, feeds: dict[str, np.ndarray]) -> None:
    expected = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    module = build_module(proto).eval()
    args = [torch.from_numpy(feeds[i.name]) for i in proto.graph.input]
    runs = [module(*args)]
    module.annotate = True  # the node-by-node path agrees
    runs.append(module(*args))
    module.annotate = False
    for got in runs:
        for g, e in zip(got, expected):
            g = g.numpy() if isinstance(g, torch.Tensor) else np.asarray(g)
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


RNG = np.random.default_rng(0)
X = RNG.standard_normal((1, 4, 5, 6)).astype(np.float32)


@pytest.mark.parametrize("attrs", [{"strides": [2, 2]}, {"strides": [2, 2], "pads": [1, 0, 0, 1], "output_padding": [1, 1]},
                                   {"group": 2, "dilations": [2, 1]}])
def test_conv_transpose(attrs) -> None:
    groups = attrs.get("group", 1)
    per_group = 3 if groups == 1 else 2  # output channels per group
    w = numpy_helper.from_array(RNG.standard_normal((4, per_group, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(RNG.standard_normal(per_group * groups).astype(np.float32), "b")
    check(model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)], [("x", F, X.shape)], [("y", F)],
                [w, b]), {"x": X})


@pytest.mark.parametrize("mode, coords, nearest", [("nearest", "asymmetric", "floor"),
                                                    ("linear", "half_pixel", None), ("linear", "align_corners", None),
                                                    ("cubic", "half_pixel", None)])
def test_resize_scales(mode, coords, nearest) -> None:
    scales = numpy_helper.from_array(np.array([1, 1, 2, 3], np.float32), "scales")
    attrs = {"mode": mode, "coordinate_transformation_mode": coords, **({"nearest_mode": nearest} if nearest else {})}
    check(model([helper.make_node("Resize", ["x", "", "scales"], ["y"], **attrs)], [("x", F, X.shape)], [("y", F)],
                [scales]), {"x": X})


def test_resize_sizes() -> None:
    sizes = numpy_helper.from_array(np.array([1, 4, 9, 4], np.int64), "sizes")
    check(model([helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear")], [("x", F, X.shape)],
                [("y", F)], [sizes]), {"x": X})


def test_expand_range_equal_constant_of_shape() -> None:
    """Shape arithmetic on the host: Shape -> Range / ConstantOfShape -> Expand; Equal on device values."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Expand", ["v", "s"], ["e"]),
             helper.make_node("Equal", ["e", "x"], ["eq"]),
             helper.make_node("ConstantOfShape", ["s"], ["z"], value=numpy_helper.from_array(np.array([1.5], np.float32))),
             helper.make_node("Add", ["z", "x"], ["zx"]),
             helper.make_node("Range", ["start", "limit", "delta"], ["r"])]
    init = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("start", 1), ("limit", 10), ("delta", 3))]
    x = np.round(RNG.standard_normal((2, 3, 4))).astype(np.float32)
    check(model(nodes, [("x", F, x.shape), ("v", F, (3, 1))], [("eq", TensorProto.BOOL), ("zx", F), ("r", I64)], init),
          {"x": x, "v": np.array([[0], [1], [-1]], np.float32)})


@pytest.mark.parametrize("opset, sizes", [(17, [1, 3]), (17, None), (18, None)])
def test_split(opset, sizes) -> None:
    inputs = ["x"]
    init = []
    attrs = {"axis": 1}
    if sizes:
        inputs.append("split")
        init.append(numpy_helper.from_array(np.array(sizes, np.int64), "split"))
    if opset >= 18 and not sizes:
        attrs["num_outputs"] = 2
    x = RNG.standard_normal((2, 4, 3)).astype(np.float32)
    check(model([helper.make_node("Split", inputs, ["a", "b"], **attrs)], [("x", F, x.shape)], [("a", F), ("b", F)],
                init, opset=opset), {"x": x})


@pytest.mark.parametrize("flag", [True, False])
def test_if_runs_the_branch_its_condition_picks(flag: bool) -> None:
    def branch(op, name):
        return helper.make_graph([helper.make_node(op, ["x", "k"], [f"{name}_y"])], name, [],
                                 [helper.make_tensor_value_info(f"{name}_y", F, None)])
    cond = numpy_helper.from_array(np.array(flag), "cond")
    k = numpy_helper.from_array(np.array(2.0, np.float32), "k")
    proto = model([helper.make_node("If", ["cond"], ["y"], then_branch=branch("Mul", "then"),
                                    else_branch=branch("Sub", "else"))], [("x", F, (2, 3))], [("y", F)], [cond, k])
    check(proto, {"x": RNG.standard_normal((2, 3)).astype(np.float32)})


def test_shape_constants_compile_into_one_graph_without_reading_tensors() -> None:
    """Slice/Reshape/Unsqueeze read their constant shape inputs as ints: the generated forward
    writes them as tuple literals, so torch.compile neither traces them as tensors (a graph break
    per use: BERT-base had 63) nor meets numpy views among the constants (an AssertionError in
    torch 2.11's Dynamo that failed every BERT-base compile cell on an H200)."""
    import torch._dynamo as dynamo

    # numpy_helper gives int64 initializers as views of their raw bytes: the case that asserted
    starts, ends = numpy_helper.from_array(np.array([1], np.int64), "s"), numpy_helper.from_array(
        np.array([5], np.int64), "e")
    axes, shape = numpy_helper.from_array(np.array([1], np.int64), "a"), numpy_helper.from_array(
        np.array([2, -1], np.int64), "shape")
    proto = model([helper.make_node("Slice", ["x", "s", "e", "a"], ["y"], name="slice"),
                   helper.make_node("Reshape", ["y", "shape"], ["z"], name="reshape"),
                   helper.make_node("Relu", ["z"], ["out"], name="relu")],
                  [("x", F, [2, 8, 3])], [("out", F)], [starts, ends, axes, shape])
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 8, 3)).astype(np.float32)}
    check(proto, feeds)
    module = build_module(proto).eval()
    assert all(value.base is None for value in module.constants.values())
    explained = dynamo.explain(module)(torch.from_numpy(feeds["x"]))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
