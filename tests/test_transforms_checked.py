"""Precision transforms are checked, not trusted: each structure that broke them on real models
(tests/precision_models.py) is converted correctly or is `unsupported` with a reason naming the
transform, never stored under a precision it did not get."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from farm.models import make_feeds
from farm.precision import TransformUnsupported, transform
from farm.precision.checks import census, one_line
from farm.records import Calibration, InputSpec
from tests.precision_models import (
    big_activation_model,
    big_variance_bn,
    cosine,
    default_fill_model,
    dynamic_quantized_model,
    elementwise_model,
    if_model,
    inputs_read_in_branches_model,
    output_in_value_info_model,
    plugin_model,
    quantized_conv_models,
    run,
    state_model,
    weights_as_inputs_model,
)

VECTOR = (InputSpec("x", "float32", ("batch", 16), -1.0, 1.0),)
VECTOR_SHAPES = {"x": (2, 16)}


def _transform(model: Path, precision: str, spec, shapes, cache: Path):
    return transform(model, model.name, precision, spec, shapes, Calibration(samples=4), True, cache, 1)


def _checked(path: Path) -> None:
    import onnx

    onnx.checker.check_model(str(path), full_check=True)


def test_fp16_keeps_values_beyond_its_range_in_fp32(tmp_path: Path) -> None:
    """A BatchNormalization variance of 9.8e7: clamped (onnxconverter-common's default), the
    output is wrong; kept fp32, it matches."""
    import onnx
    from onnxconverter_common import float16

    spec = (InputSpec("x", "float32", ("batch", 3, 16, 16), -1.0, 1.0),)
    shapes = {"x": (2, 3, 16, 16)}
    model = big_variance_bn(tmp_path / "bn.onnx")
    feeds = make_feeds(spec, shapes, 7)
    reference = run(model, feeds)[0]

    clamped = float16.convert_float_to_float16(onnx.load(model), keep_io_types=True)
    onnx.save(clamped, tmp_path / "clamped.onnx")
    assert cosine(run(tmp_path / "clamped.onnx", feeds)[0], reference) < 0.99  # the bug this guards against

    fp16 = _transform(model, "fp16", spec, shapes, tmp_path / "cache")
    _checked(fp16.path)
    assert cosine(run(fp16.path, feeds)[0], reference) > 0.999
    assert fp16.counts["nodes_kept_fp32_range"] == 1 and fp16.counts["tensors_fp16"] > 0
    assert "1 for values beyond fp16's range" in fp16.summary
    bn = next(t for t in onnx.load(fp16.path).graph.initializer if t.name == "bn.var")
    assert bn.data_type == onnx.TensorProto.FLOAT and onnx.numpy_helper.to_array(bn).max() == pytest.approx(9.8e7)
    assert fp16.onnxruntime_cpu and "fp32 kernels" in fp16.onnxruntime_cpu  # ORT CPU's fp16, said


def test_fp16_keeps_activations_beyond_its_range_in_fp32(tmp_path: Path) -> None:
    """No weight beyond fp16's range, but an activation up to ~5e5 on the seeded inputs: the nodes
    making and reading it stay fp32. (Converted, it is inf in fp16 arithmetic, as on a GPU; ONNX
    Runtime's CPU EP hides that by running these Muls as fp32 kernels, so the output is finite
    either way here: the test checks what the transform kept.)"""
    model = big_activation_model(tmp_path / "act.onnx")
    fp16 = _transform(model, "fp16", VECTOR, VECTOR_SHAPES, tmp_path / "cache")
    _checked(fp16.path)
    feeds = make_feeds(VECTOR, VECTOR_SHAPES, 7)
    got, want = run(fp16.path, feeds)[0], run(model, feeds)[0]
    assert np.isfinite(got).all() and cosine(got, want) > 0.999
    assert fp16.counts["nodes_kept_fp32_range"] == 2  # scale2 makes it, shrink reads it


def test_fp16_keeps_integer_arithmetic_in_fp32(tmp_path: Path) -> None:
    """Dynamically quantized convolutions: the int32 accumulator made float and scaled, and the
    older quantizer's bias quotient cast to int32, stay fp32 (in fp16 the accumulator, up to 2^31,
    and the quotient leave fp16's range: on ONNX Runtime CUDA a quantized OCR model gave the same
    output for every input). ONNX Runtime's CPU EP runs fp16 arithmetic in fp32 kernels and hides
    the overflow, so the test checks what the transform kept, and that it computes the same."""
    import onnx

    spec = (InputSpec("x", "float32", ("batch", 3, 16, 16), -1.0, 1.0),)
    shapes = {"x": (2, 3, 16, 16)}
    feeds = make_feeds(spec, shapes, 7)
    current, older = quantized_conv_models(tmp_path)
    kept = {current: ("c_output_quantized_cast", "conv_quant_output_scale_mul"),
            older: ("bias_quotient", "bias_rounded", "bias_int", "scales", "acc_float", "dequantize")}
    for model, names in kept.items():
        fp16 = _transform(model, "fp16", spec, shapes, tmp_path / f"cache-{model.stem}")
        _checked(fp16.path)
        converted = onnx.shape_inference.infer_shapes(onnx.load(fp16.path))
        graph = converted.graph
        types = {v.name: v.type.tensor_type.elem_type for v in [*graph.value_info, *graph.input, *graph.output]}
        types |= {t.name: t.data_type for t in converted.graph.initializer}
        by_name = {n.name: n for n in converted.graph.node}
        for name in names:
            node = by_name[name]
            floats = [types[i] for i in [*node.input, *node.output]
                      if types.get(i) in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)]
            assert floats and set(floats) == {onnx.TensorProto.FLOAT}, (model.name, name, floats)
        assert f"{len(names)} computing integers" in fp16.summary and fp16.counts["tensors_fp16"] > 0
        assert cosine(run(fp16.path, feeds)[0], run(model, feeds)[0]) > 0.999


def test_fp16_if_subgraphs_are_converted_validly(tmp_path: Path) -> None:
    """Branches reading a tensor made by a node kept in fp32: onnxconverter-common orders the
    `If` before that tensor's Cast (checker: "Nodes in a graph must be topologically sorted")."""
    model = if_model(tmp_path / "if.onnx")
    feeds = make_feeds(VECTOR, VECTOR_SHAPES, 7)
    try:
        fp16 = _transform(model, "fp16", VECTOR, VECTOR_SHAPES, tmp_path / "cache")
    except TransformUnsupported as exc:  # the other acceptable outcome: said, naming the transform
        assert exc.reason.startswith("fp16 transform (onnxconverter-common ") and "\n" not in exc.reason
        return
    _checked(fp16.path)
    assert cosine(run(fp16.path, feeds)[0], run(model, feeds)[0]) > 0.999
    assert fp16.counts["subgraphs"] == 2 and "2 subgraphs converted too" in fp16.summary
    import onnx

    branch_weights = [t for n in onnx.load(fp16.path).graph.node if n.op_type == "If"
                      for a in n.attribute for t in a.g.initializer]
    assert branch_weights and all(t.data_type == onnx.TensorProto.FLOAT16 for t in branch_weights)


def test_fp16_state_output_read_inside(tmp_path: Path) -> None:
    """A recurrent step whose new state is both an output and read by the next node."""
    spec = (InputSpec("x", "float32", ("batch", 32), -1.0, 1.0), InputSpec("h", "float32", ("batch", 64), -1.0, 1.0))
    shapes = {"x": (2, 32), "h": (2, 64)}
    model = state_model(tmp_path / "state.onnx")
    fp16 = _transform(model, "fp16", spec, shapes, tmp_path / "cache")
    _checked(fp16.path)
    feeds = make_feeds(spec, shapes, 7)
    for got, want in zip(run(fp16.path, feeds), run(model, feeds)):
        assert got.dtype == np.float32 and cosine(got, want) > 0.999


def test_int8_that_quantizes_nothing_is_unsupported(tmp_path: Path) -> None:
    model = elementwise_model(tmp_path / "elementwise.onnx")
    with pytest.raises(TransformUnsupported, match=r"^int8 transform \(onnxruntime.quantization .*\): nothing was "
                                                   r"quantized \(0 Q/DQ pairs"):
        _transform(model, "int8", VECTOR, VECTOR_SHAPES, tmp_path / "cache")
    # Every MatMul inside `If` branches: quantize_static does not enter them.
    branches = if_model(tmp_path / "branches.onnx", top_matmul=False)
    with pytest.raises(TransformUnsupported) as caught:
        _transform(branches, "int8", VECTOR, VECTOR_SHAPES, tmp_path / "cache")
    assert "nothing was quantized" in caught.value.reason and "subgraphs" in caught.value.reason
    # The verdict is cached with the model: a second sweep says the same without quantizing again.
    with pytest.raises(TransformUnsupported, match="nothing was quantized"):
        _transform(branches, "int8", VECTOR, VECTOR_SHAPES, tmp_path / "cache")
    assert not list((tmp_path / "cache" / "precision").glob("*.onnx"))  # nothing stored as int8


def test_int8_counts_what_it_quantized(tmp_path: Path) -> None:
    import onnx

    model = if_model(tmp_path / "if.onnx")
    int8 = _transform(model, "int8", VECTOR, VECTOR_SHAPES, tmp_path / "cache")
    _checked(int8.path)
    counted = census(onnx.load(int8.path))
    assert int8.counts["qdq_pairs"] == counted.qdq_pairs > 0
    assert int8.counts["quantized_nodes"] == counted.quantized_nodes > 0
    assert int8.counts["nodes_kept_fp32"] == 8  # the branches' nodes
    assert "left fp32 (quantize_static does not enter subgraphs)" in int8.summary
    again = _transform(model, "int8", VECTOR, VECTOR_SHAPES, tmp_path / "cache")
    assert again.cached and again.summary == int8.summary and again.counts == int8.counts


def test_invalid_output_is_unsupported_naming_the_transform(tmp_path: Path, monkeypatch) -> None:
    """Whatever breaks a converted model, the cell says which transform made it, on one line."""
    from onnxconverter_common import float16

    real = float16.convert_float_to_float16

    def broken(model, **kwargs):
        converted = real(model, **kwargs)
        converted.graph.node.reverse()  # out of order, as onnxconverter-common leaves If branches
        return converted

    monkeypatch.setattr(float16, "convert_float_to_float16", broken)
    monkeypatch.setattr("farm.precision.fp16._sort_graphs", lambda model: None)
    with pytest.raises(TransformUnsupported) as caught:
        _transform(if_model(tmp_path / "if.onnx"), "fp16", VECTOR, VECTOR_SHAPES, tmp_path / "cache")
    reason = caught.value.reason
    assert reason.startswith("fp16 transform (onnxconverter-common ") and "produced an invalid model" in reason
    assert reason.endswith("or convert the model yourself and give that file as the source")  # what to do
    assert "\n" not in reason and len(reason) <= 500 and "topologically sorted" in caught.value.detail


def test_a_model_onnx_runtime_cannot_run_is_not_blamed_on_the_transform(tmp_path: Path) -> None:
    """A TensorRT plugin ONNX Runtime lacks: the fp16 model is made and checked by onnx.checker,
    and the summary says what could not be checked, instead of an `unsupported` TensorRT cell."""
    import onnx

    fp16 = _transform(plugin_model(tmp_path / "plugin.onnx"), "fp16", VECTOR, VECTOR_SHAPES, tmp_path / "cache")
    _checked(fp16.path)
    assert "activation ranges not checked" in fp16.summary
    assert "not loaded in ONNX Runtime: the original model does not load there either" in fp16.summary
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in onnx.load(fp16.path).graph.initializer)


def test_reasons_are_whole_sentences() -> None:
    long = "First sentence is short. " + "word " * 200
    assert one_line(long) == "First sentence is short."
    cut = one_line("x" * 10 + " " + "word " * 200)
    assert cut.endswith("(full text in the traceback)") and len(cut) <= 500
    assert one_line("a\n  b") == "a b"


def test_sweep_stores_what_the_transform_did(tmp_path: Path, capsys) -> None:
    """Through a real sweep: the fp16 BatchNorm model is measured with its transform's summary and
    counts in `builds`; int8 of a model with nothing to quantize is an `unsupported` cell whose
    reason names the transform, with no build, measurement or accuracy rows."""
    from farm.cli import main
    from farm.warehouse import Warehouse
    from tests.conftest import write_sweep

    (tmp_path / "models").mkdir()
    big_variance_bn(tmp_path / "models" / "bn.onnx")
    elementwise_model(tmp_path / "models" / "elementwise.onnx")
    config = write_sweep(tmp_path, """
        name = "checked"
        [[models]]
        source = "models/bn.onnx"
        [[models]]
        source = "models/elementwise.onnx"
        [axes]
        precisions = ["fp16", "int8"]
        batch_sizes = [2]
        [models.calibration]
        samples = 2
        """)
    assert main(["sweep", str(config), "--results", str(tmp_path / "results"), "--executor", "local"]) == 0
    capsys.readouterr()
    con = Warehouse(tmp_path / "results").connect()
    rows = con.execute("""SELECT c.model, c.precision, c.status, c.reason, b.transform_summary, b.transform_tool,
                                 b.transform_nodes_kept_fp32_range, b.transform_qdq_pairs, a.cosine_similarity
                          FROM cells c LEFT JOIN builds b USING (cell_id) LEFT JOIN accuracy a USING (cell_id)
                          ORDER BY 1, 2""").fetchall()
    by_cell = {(r[0].split("/")[-1].removesuffix(".onnx"), r[1]): r[2:] for r in rows}
    status, reason, summary, tool, kept_range, _, cosine_value = by_cell[("bn", "fp16")]
    assert status == "ok" and summary.startswith("fp16: ") and "fp32 kernels" in summary  # ORT CPU, said
    assert tool.startswith("onnxconverter-common ") and kept_range == 1 and cosine_value > 0.999
    status, reason, summary, tool, _, qdq, _ = by_cell[("bn", "int8")]
    assert status == "ok" and summary.startswith("int8: ") and qdq > 0 and tool.startswith("onnxruntime")
    status, reason, summary, *_ = by_cell[("elementwise", "int8")]
    assert status == "unsupported" and summary is None
    assert reason.startswith("int8 transform (onnxruntime.quantization ") and "nothing was quantized" in reason


@pytest.mark.parametrize("build, inputs", [
    (output_in_value_info_model, ("x",)),  # the converter raised "The downstream node of the second cast node..."
    (weights_as_inputs_model, ("x",)),  # inputs declared fp32 for fp16 weights
    (inputs_read_in_branches_model, ("x", "state")),  # fp16 branches reading fp32 inputs
    (dynamic_quantized_model, ("x",)),  # DynamicQuantizeLinear given fp16
    (default_fill_model, ("x",)),  # a ConstantOfShape declared fp16 that fills fp32
])
def test_fp16_structures_of_third_party_models(tmp_path: Path, build, inputs) -> None:
    """Structures of real models (docs/models.md) the converter alone turned into an invalid model
    or an exception: converted, valid, and computing what the fp32 model computes."""
    spec = tuple(InputSpec(name, "float32", ("batch", 16), -1.0, 1.0) for name in inputs)
    shapes = {name: (2, 16) for name in inputs}
    model = build(tmp_path / "model.onnx")
    fp16 = _transform(model, "fp16", spec, shapes, tmp_path / "cache")
    _checked(fp16.path)
    feeds = make_feeds(spec, shapes, 7)
    assert fp16.counts["tensors_fp16"] > 0
    assert cosine(run(fp16.path, feeds)[0], run(model, feeds)[0]) > 0.999
