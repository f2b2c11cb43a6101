"""The PyTorch backend on the CPU (CI has no GPU): same weights and outputs as ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

torch = pytest.importorskip("torch")

from farm.backends import backend_class
from farm.backends.base import standalone_request
from farm.cell_runner import build_request, run_cell
from farm.config import Measurement, ModelSpec
from farm.models import resolve_model
from farm.models.zoo import make_bert, make_resnet
from farm.onnx_torch import UnsupportedOperator, build_module
from farm.records import Cell
from tests.conftest import saved_model, tiny_cnn, unsupported_op_model


def ort_outputs(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("depth", [18, 50])
def test_resnet_matches_onnxruntime(depth: int) -> None:
    model = make_resnet(depth, image=64)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, 64, 64)).astype(np.float32)
    (expected,) = ort_outputs(model, {"input": x})
    (got,) = build_module(model).eval()(torch.from_numpy(x))
    np.testing.assert_allclose(got.detach().numpy(), expected, rtol=1e-3, atol=1e-4)


def test_bert_matches_onnxruntime() -> None:
    model = make_bert(layers=2, hidden=32, heads=4, intermediate=64, vocab=100, max_positions=64, name="bert-tiny")
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 100, (3, 11))
    feeds = {"input_ids": ids, "token_type_ids": rng.integers(0, 2, (3, 11)), "attention_mask": np.ones_like(ids)}
    expected = ort_outputs(model, feeds)
    got = build_module(model).eval()(*[torch.from_numpy(feeds[n]) for n in ("input_ids", "token_type_ids",
                                                                              "attention_mask")])
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.detach().numpy(), e, rtol=1e-3, atol=1e-4)


def test_unknown_operator_is_named(tmp_path: Path) -> None:
    import onnx

    with pytest.raises(UnsupportedOperator, match="farm.test.NoSuchOperator"):
        build_module(onnx.load(unsupported_op_model(tmp_path / "bad.onnx")))


FAST = Measurement(warmup_ms=1, min_iterations=5, min_duration_ms=10, repeats=2, layer_iterations=3)


def torch_cell(tmp_path: Path, precision: str, **options) -> Cell:
    tiny_cnn(tmp_path / "tiny.onnx", channels=8, spatial=16)
    model = resolve_model(ModelSpec(source="tiny.onnx"), 0, tmp_path, tmp_path / "cache")
    opts = {"device": "cpu", "mode": "eager", "compile_mode": "default", "transfers": True, **options}
    reason = backend_class("torch").unsupported_reason(precision, opts)
    return Cell("t" * 16, "s", model, precision, 2, None, "torch", opts, FAST, {"x": (2, 3, 16, 16)}, reason,
                None, backend_class("torch").device_kind(opts))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_torch_cell_on_cpu(tmp_path: Path, precision: str) -> None:
    result = run_cell(torch_cell(tmp_path, precision), tmp_path / "cache")
    assert result.status == "ok", result.traceback
    m = result.measurement
    assert m["queries"] >= 10 and m["throughput_qps"] > 0 and m["h2d_mean_ms"] is None
    assert result.device["kind"] == "cpu"
    conv = next(layer for layer in result.layers if layer.type == "Conv")
    element = 4 if precision == "fp32" else 2
    assert conv.input_bytes == 2 * 3 * 16 * 16 * element
    assert conv.weight_bytes == 8 * 3 * 3 * 3 * element  # bias excluded
    assert conv.output_bytes == 2 * 8 * 16 * 16 * element
    assert conv.macs == 2 * 8 * 16 * 16 * 27
    assert len(conv.times_ms) == 3 and all(t >= 0 for t in conv.times_ms)
    assert [layer.name for layer in result.layers] == ["conv", "relu", "pool", "flatten", "fc"]


def test_torch_compile_on_cpu(tmp_path: Path) -> None:
    result = run_cell(torch_cell(tmp_path, "fp32", mode="compile"), tmp_path / "cache")
    assert result.status == "ok", result.traceback
    assert result.build.build_s > 0 and result.layers and all(layer.type == "kernel" for layer in result.layers)
    # compile-mode rows are kernels, one time per profiled query (FAST: 3), summed over its launches
    assert all(layer.kind == "kernel" and layer.calls == 3 and len(layer.times_ms) == 3 for layer in result.layers)


def test_a_compiled_cell_says_how_many_graphs_came_from_inductors_cache(tmp_path: Path) -> None:
    """The same cell compiled twice in one process: the second build takes its graph from inductor's
    cache (its build time is then not a compile's), and its build row counts it."""
    first = run_cell(torch_cell(tmp_path, "fp32", mode="compile"), tmp_path / "cache")
    second = run_cell(torch_cell(tmp_path, "fp32", mode="compile"), tmp_path / "cache")
    assert first.status == second.status == "ok", (first.traceback, second.traceback)
    assert isinstance(first.build.cache_hits, int) and second.build.cache_hits >= 1


def test_a_weight_only_product_lowered_by_inductor_is_named() -> None:
    """inductor's weight-only pattern (bf16 activations by int8 weights and bf16 scales) fires on the
    CPU too: the counts the backend reads see each product, and the note names them (on CUDA with
    why it is slow); a compile without it says nothing."""
    pytest.importorskip("torchao")
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    from farm.backends.torch.backend import inductor_counts, lowering_note

    module = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 32)).to(torch.bfloat16).eval()
    quantize_(module, Int8WeightOnlyConfig())
    torch._dynamo.reset()
    before = inductor_counts()
    with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False):  # lowered here, not read from disk
        torch.compile(module, dynamic=False)(torch.randn(8, 64, dtype=torch.bfloat16))
    compiled = inductor_counts(before)
    assert compiled["woq_matcher_count"] == 2
    assert lowering_note(compiled, cuda=False) == "torch.compile ran 2 int8 weight-only products as aten._weight_int8pack_mm"
    assert "without tensor cores" in lowering_note(compiled, cuda=True)
    assert lowering_note(inductor_counts(inductor_counts()), cuda=True) is None


def test_eager_rows_are_graph_ops_and_coverage_is_stored(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from farm.warehouse import Warehouse
    from farm.warehouse.rows import write_cell_result

    cell = torch_cell(tmp_path, "fp32")
    result = run_cell(cell, tmp_path / "cache")
    assert result.status == "ok", result.traceback
    assert {layer.kind for layer in result.layers} == {"graph op"}
    write_cell_result(Warehouse(tmp_path / "results"), cell, result, "r", "h")
    layers = pq.read_table(tmp_path / "results" / "s" / "layers" / f"{cell.cell_id}.parquet").to_pandas()
    measurement = pq.read_table(tmp_path / "results" / "s" / "measurements" / f"{cell.cell_id}.parquet").to_pylist()[0]
    assert set(layers.kind) == {"graph op"}
    expected = 100 * layers.time_avg_ms.sum() / measurement["compute_median_ms"]  # CPU: compute = the query
    assert measurement["layer_coverage_percent"] == pytest.approx(expected)


def constant_weight_model(path: Path) -> Path:
    """x @ W + b with W and b held in Constant nodes, not initializers (as some exporters write them)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    w = numpy_helper.from_array(rng.standard_normal((6, 4)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [helper.make_node("Constant", [], ["w"], name="const_w", value=w),
             helper.make_node("Constant", [], ["b"], name="const_b", value=b),
             helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
             helper.make_node("Add", ["m", "b"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "constants", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    return saved_model(graph, path)


def test_weights_in_constant_nodes_count_as_weights(tmp_path: Path) -> None:
    constant_weight_model(tmp_path / "const.onnx")
    backend = backend_class("torch")({"device": "cpu"})
    feeds = {"x": np.ones((2, 6), np.float32)}
    backend.build(standalone_request(tmp_path / "const.onnx", feeds, "fp32", tmp_path), feeds)
    layers = {layer.name: layer for layer in backend.profile_layers(feeds, 2)}
    backend.close()
    matmul, add = layers["matmul"], layers["add"]
    assert matmul.weight_bytes == 6 * 4 * 4 and matmul.input_bytes == 2 * 6 * 4  # W is a weight, not an input
    assert matmul.input_tensors == ["x"] and matmul.macs == 2 * 4 * 6
    assert add.weight_bytes == 4 * 4 and add.input_tensors == ["m"]


def test_cpu_cannot_run_tf32_or_cuda_graphs(tmp_path: Path) -> None:
    assert "tf32" in torch_cell(tmp_path, "tf32").unsupported_reason
    assert "CUDA graphs" in torch_cell(tmp_path, "fp32", mode="cudagraphs").unsupported_reason
    result = run_cell(torch_cell(tmp_path, "int8"), tmp_path / "cache")
    assert result.status == "unsupported" and "int8" in result.reason


def test_cuda_cell_without_a_gpu_is_skipped_with_how_to_fix(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    cell = torch_cell(tmp_path, "fp32", device="cuda")
    assert cell.device_kind == "cuda"
    result = run_cell(cell, tmp_path / "cache")
    assert result.status == "skipped" and 'device = "cpu"' in result.reason


def test_outputs_are_those_of_the_inputs_given(tmp_path: Path) -> None:
    """Accuracy runs its own evaluation set through the cell's engine: outputs() must use it, not
    the inputs the engine was built with."""
    import onnx

    from farm.models import make_feeds

    cell = torch_cell(tmp_path, "fp32")
    backend = backend_class("torch")(cell.options)
    built_with = make_feeds(cell.model.inputs, cell.input_shapes, 0)
    backend.build(build_request(cell, cell.model.path, tmp_path / "work", tmp_path / "cache"), built_with)
    other = make_feeds(cell.model.inputs, cell.input_shapes, 1)
    (expected,) = ort_outputs(onnx.load(str(cell.model.path)), other)
    (got,) = backend.outputs(other).values()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    (again,) = backend.outputs(built_with).values()
    assert not np.allclose(got, again)  # other inputs, other outputs; and `got` was not overwritten
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    backend.close()


def test_constants_are_decoded_once_at_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(constant_weight_model(tmp_path / "const.onnx"))
    module = build_module(model).eval()
    calls = []
    real = numpy_helper.to_array
    monkeypatch.setattr(numpy_helper, "to_array", lambda *a, **k: calls.append(1) or real(*a, **k))
    x = np.ones((2, 6), np.float32)
    (got,) = module(torch.from_numpy(x))
    (expected,) = ort_outputs(model, {"x": x})
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)
    module.annotate = True  # the node-by-node path reads the decoded values too
    module(torch.from_numpy(x))
    assert calls == []


def test_forward_is_straight_line_code_with_few_compile_guards() -> None:
    """Each node one generated line; torch.compile guards the weights and the interpreter's few
    globals, not a loop over nodes (ResNet-50 went from about 3,000 guards to 312)."""
    model = make_resnet(18, image=32)
    module = build_module(model).eval()
    lines = [line for line in module.source.splitlines() if "op_" in line]
    assert len(lines) == len(model.graph.node) and "for " not in module.source
    torch._dynamo.reset()
    explain = torch._dynamo.explain(module)(torch.zeros(1, 3, 32, 32))
    assert explain.graph_count == 1 and explain.graph_break_count == 0
    weights = len(list(module.buffers()))
    assert len(explain.out_guards) <= weights + 60, (len(explain.out_guards), weights)


def test_options_memory_format_and_threads_on_cpu(tmp_path: Path) -> None:
    cell = torch_cell(tmp_path, "fp32")
    feeds = {"x": np.random.default_rng(3).standard_normal((2, 3, 16, 16)).astype(np.float32)}
    (expected,) = ort_outputs(__import__("onnx").load(str(cell.model.path)), feeds)
    for options, layout in (({}, "contiguous"), ({"memory_format": "channels_last"}, "channels_last"),
                            ({"memory_format": "contiguous"}, "contiguous")):
        backend = backend_class("torch")({"device": "cpu", "threads": 1, **options})
        backend.build(standalone_request(cell.model.path, feeds, "fp32", tmp_path), feeds)
        assert backend.memory_format(backend.module) == layout and torch.get_num_threads() == 1
        (x,) = backend.device_inputs
        assert x.is_contiguous(memory_format=torch.channels_last) == (layout == "channels_last")
        (got,) = backend.outputs(feeds).values()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
        backend.close()


@pytest.mark.parametrize("key, value, says", [("memory_format", "nhwc", "memory_format"),
                                               ("threads", -1, "threads"), ("cudnn_benchmark", 1, "cudnn_benchmark")])
def test_a_wrong_option_is_one_line(tmp_path: Path, key: str, value, says: str) -> None:
    from farm.config import ConfigError, load_config

    tiny_cnn(tmp_path / "tiny.onnx")
    text = (f'name = "t"\n[[models]]\nsource = "tiny.onnx"\n[axes]\nbackends = ["torch"]\n'
            f'[backends.torch]\n{key} = {value!r}\n').replace("'", '"')
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    assert "\n" not in message and f"backends.torch.{says}" in message, message


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the current stream is CUDA's")
def test_a_cuda_query_called_from_other_threads_runs_on_the_cells_stream(tmp_path: Path) -> None:
    """A serving batcher calls the query from its own thread, a new one for each LoadGen test (and a
    thread's id is reused once it ends): the query makes the cell's stream current there, so its
    launches, copies and the events it waits on are one stream (on an H200 an unbound thread's
    queries returned in 0.07 ms against 1.67 ms for the engine, before the GPU had run them)."""
    import threading

    model = tiny_cnn(tmp_path / "tiny.onnx")
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)}
    backend = backend_class("torch")({"device": "cuda", "mode": "eager"})
    backend.build(standalone_request(model, feeds, "fp32", tmp_path), feeds)
    query, seen = backend.query_fn(feeds), []
    try:
        for _ in range(3):  # threads one after another: the later ones may reuse the first one's id
            thread = threading.Thread(target=lambda: (query(), seen.append(torch.cuda.current_stream())))
            thread.start()
            thread.join()
    finally:
        backend.close()
    assert seen == [backend.stream] * 3
