"""The ONNX Runtime backend on real ONNX Runtime: build, time, per-layer rows, failures."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from farm.backends import backend_class
from farm.config import Measurement
from farm.models import make_feeds, resolve_model
from farm.config import ModelSpec
from farm.plan import Cell
from farm.precision import Calibration
from farm.worker import run_cell
from tests.conftest import tiny_cnn, unsupported_op_model

FAST = Measurement(warmup_ms=1, min_iterations=5, min_duration_ms=10, repeats=1, layer_iterations=4)


def make_cell(model_dir: Path, file: str, batch: int = 2, precision: str = "fp32") -> Cell:
    model = resolve_model(ModelSpec(source=file), 0, model_dir, model_dir / "cache")
    shapes = {} if model.error else {i.name: i.concrete_shape(batch, model.dims) for i in model.inputs}
    reason = backend_class("onnxruntime").unsupported_reason(precision, {})
    return Cell("c" * 16, "s", model, precision, batch, None, "onnxruntime", {}, FAST, shapes, reason,
                calibration=Calibration())


def test_build_query_and_layers(tmp_path: Path) -> None:
    tiny_cnn(tmp_path / "tiny.onnx", channels=4, spatial=8)
    # "extended" fuses but keeps the NCHW layout, so the sizes are the model's own
    backend = backend_class("onnxruntime")({"intra_op_threads": 1, "graph_optimization": "extended"})
    feeds = {"x": np.ones((2, 3, 8, 8), np.float32)}
    stats = backend.build(tmp_path / "tiny.onnx", feeds, "fp32", tmp_path)
    assert stats.build_s > 0 and stats.artifact_bytes > 0
    assert stats.layers_before_fusion == 5 and 0 < stats.layers_after_fusion <= 5
    assert backend.query_fn(feeds)() is None
    layers = backend.profile_layers(feeds, iterations=4)
    assert layers and all(len(layer.times_ms) == 4 for layer in layers)  # warm-up runs dropped
    conv = next(layer for layer in layers if layer.type in ("Conv", "FusedConv"))
    # input 2x3x8x8 fp32; weights 4x3x3x3 fp32 (bias excluded, as trex does); output 2x4x8x8
    assert conv.input_bytes == 2 * 3 * 8 * 8 * 4
    assert conv.weight_bytes == 4 * 3 * 3 * 3 * 4
    assert conv.output_bytes == 2 * 4 * 8 * 8 * 4
    assert conv.macs == 2 * 4 * 8 * 8 * 3 * 3 * 3
    assert conv.fused_ops == "Conv+Relu"  # ONNX Runtime fused the Relu into the convolution
    gemm = next(layer for layer in layers if layer.type in ("Gemm", "FusedGemm"))
    assert gemm.weight_bytes == 5 * 4 * 4 and gemm.macs == 2 * 5 * 4
    backend.close()


def test_layers_describe_the_optimized_graph(tmp_path: Path) -> None:
    """At level "all" the CPU provider may run convolutions in NCHWc layout, channels padded to a
    whole block whose size depends on the CPU (8 with AVX2, 16 with AVX-512): the per-layer rows
    describe the tensors that really run, padding included, whatever the block here."""
    tiny_cnn(tmp_path / "tiny.onnx", channels=4, spatial=8)
    backend = backend_class("onnxruntime")({"graph_optimization": "all"})
    feeds = {"x": np.ones((2, 3, 8, 8), np.float32)}
    backend.build(tmp_path / "tiny.onnx", feeds, "fp32", tmp_path)
    layers = backend.profile_layers(feeds, iterations=2)
    conv = next(layer for layer in layers if layer.type == "Conv")
    [[batch, channels, height, width]] = conv.output_shapes  # as the profiler saw the output at run time
    assert (batch, height, width) == (2, 8, 8)
    # the bytes are those of the shapes that ran: the weights the optimizer wrote (one filter per
    # output channel, padded ones included), the output as the profiler saw it
    assert conv.weight_bytes == channels * 3 * 3 * 3 * 4 and conv.output_bytes == 2 * channels * 8 * 8 * 4
    assert conv.input_shapes == [[2, 3, 8, 8]] and conv.input_bytes == 2 * 3 * 8 * 8 * 4
    reorders = [layer for layer in layers if layer.type == "ReorderOutput"]
    if conv.tactic.endswith("com.microsoft.nchwc"):
        # the 4 channels padded up to a whole block (blocks are powers of two: 8 for the AVX2 kernels,
        # 16 for AVX-512), and a reorder back to the model's own 4 channels before the pooling
        assert channels >= 4 and channels & (channels - 1) == 0
        [reorder] = reorders
        assert reorder.input_shapes == [[2, channels, 8, 8]] and reorder.output_shapes == [[2, 4, 8, 8]]
        assert reorder.input_bytes == conv.output_bytes and reorder.output_bytes == 2 * 4 * 8 * 8 * 4
    else:  # a CPU ONNX Runtime has no NCHWc kernels for runs the model's own layout
        assert channels == 4 and not reorders
    pool = next(layer for layer in layers if layer.type == "GlobalAveragePool")
    assert pool.input_shapes == [[2, 4, 8, 8]] and pool.output_shapes == [[2, 4, 1, 1]]


def test_run_cell_ok(tmp_path: Path) -> None:
    tiny_cnn(tmp_path / "tiny.onnx")
    result = run_cell(make_cell(tmp_path, "tiny.onnx"), tmp_path / "cache")
    assert result.status == "ok", result.traceback
    assert result.measurement["queries"] >= 5 and result.measurement["throughput_qps"] > 0
    assert result.measurement["h2d_mean_ms"] is None and result.measurement["compute_mean_ms"] > 0
    assert result.device["kind"] == "cpu" and result.layers
    assert not (tmp_path / "cache" / "work" / ("c" * 16)).exists()  # work folder cleaned


def test_unsupported_op_is_a_failed_cell(tmp_path: Path) -> None:
    unsupported_op_model(tmp_path / "bad.onnx")
    result = run_cell(make_cell(tmp_path, "bad.onnx"), tmp_path / "cache")
    assert result.status == "failed"
    assert "NoSuchOperator" in result.reason and "\n" not in result.reason
    assert "Traceback" in result.traceback


def test_corrupt_model_is_a_failed_cell(tmp_path: Path) -> None:
    (tmp_path / "corrupt.onnx").write_bytes(b"garbage" * 100)
    result = run_cell(make_cell(tmp_path, "corrupt.onnx"), tmp_path / "cache")
    assert result.status == "failed" and result.reason.startswith("cannot read corrupt.onnx as an ONNX model")


def test_unsupported_precision_is_not_built(tmp_path: Path) -> None:
    tiny_cnn(tmp_path / "tiny.onnx")
    result = run_cell(make_cell(tmp_path, "tiny.onnx", precision="bf16"), tmp_path / "cache")
    assert result.status == "unsupported" and "bf16" in result.reason and result.build is None


def test_feeds_match_model_dtypes(tmp_path: Path) -> None:
    tiny_cnn(tmp_path / "tiny.onnx")
    cell = make_cell(tmp_path, "tiny.onnx", batch=3)
    feeds = make_feeds(cell.model.inputs, cell.input_shapes, seed=1)
    assert feeds["x"].shape == (3, 3, 8, 8) and feeds["x"].dtype == np.float32
