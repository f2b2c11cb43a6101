"""The ONNX Runtime backend on real ONNX Runtime: build, time, per-layer rows, failures."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from farm.backends import backend_class
from farm.backends.base import standalone_request
from farm.cell_runner import run_cell
from farm.config import Measurement, ModelSpec
from farm.models import make_feeds, resolve_model
from farm.precision import Calibration
from farm.records import Cell
from tests.conftest import saved_model, tiny_cnn, unsupported_op_model

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
    stats = backend.build(standalone_request(tmp_path / "tiny.onnx", feeds, "fp32", tmp_path), feeds)
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


@pytest.mark.parametrize("spinning", [True, False])
def test_spinning_off_is_the_sessions_own_setting(tmp_path: Path, spinning: bool) -> None:
    """`spinning = false` is ONNX Runtime's allow_spinning 0 on both thread pools (onnxruntime_perf_test
    -D), read back from the built session; the default leaves ONNX Runtime's own (spinning)."""
    tiny_cnn(tmp_path / "tiny.onnx", channels=4, spatial=8)
    backend = backend_class("onnxruntime")({"intra_op_threads": 2, "spinning": spinning})
    feeds = {"x": np.ones((2, 3, 8, 8), np.float32)}
    backend.build(standalone_request(tmp_path / "tiny.onnx", feeds, "fp32", tmp_path), feeds)
    entries = backend.session.get_session_options()

    def entry(key: str) -> str | None:
        try:
            return entries.get_session_config_entry(key)
        except RuntimeError:  # ONNX Runtime's answer for a key never set
            return None

    read = [entry(f"session.{pool}.allow_spinning") for pool in ("intra_op", "inter_op")]
    assert read == ([None, None] if spinning else ["0", "0"])
    assert backend.query_fn(feeds)() is None
    backend.close()


def test_layers_describe_the_optimized_graph(tmp_path: Path) -> None:
    """At level "all" the CPU provider may run convolutions in NCHWc layout, channels padded to a
    whole block whose size depends on the CPU (8 with AVX2, 16 with AVX-512): the per-layer rows
    describe the tensors that really run, padding included, whatever the block here."""
    tiny_cnn(tmp_path / "tiny.onnx", channels=4, spatial=8)
    backend = backend_class("onnxruntime")({"graph_optimization": "all"})
    feeds = {"x": np.ones((2, 3, 8, 8), np.float32)}
    backend.build(standalone_request(tmp_path / "tiny.onnx", feeds, "fp32", tmp_path), feeds)
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
    # what the latency includes, as for TensorRT cells: host in to host out, no graph, one stream
    import onnxruntime

    m = result.measurement
    assert m["timing_engine_version"] == f"onnxruntime {onnxruntime.__version__}" and m["timing_streams"] == 1
    assert m["latency_includes_transfers"] is True and m["timing_cuda_graph"] is False


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


def if_model(path: Path) -> Path:
    """One If node whose branches each run a MatMul and an activation: all the work is in a subgraph."""
    from onnx import TensorProto, helper, numpy_helper

    def branch(name: str, activation: str):
        weight = numpy_helper.from_array(np.full((16, 16), 0.5, np.float32), f"{name}_w")
        nodes = [helper.make_node("MatMul", ["x", f"{name}_w"], [f"{name}_m"], name=f"{name}_matmul"),
                 helper.make_node(activation, [f"{name}_m"], [f"{name}_out"], name=f"{name}_act")]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT,
                                                                                 [16, 16])], initializer=[weight])

    node = helper.make_node("If", ["c"], ["y"], name="the_if", then_branch=branch("then", "Relu"),
                            else_branch=branch("else", "Sigmoid"))
    graph = helper.make_graph([node], "if", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 16]),
                                             helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 16])])
    return saved_model(graph, path)


def test_an_if_node_does_not_count_its_body_twice(tmp_path: Path) -> None:
    """ONNX Runtime times the If node around its branch's nodes and each of those nodes too: the If's
    row keeps only its own time, so the rows of one run add up to the If's duration, not more."""
    import json

    import onnx
    import onnxruntime as ort

    from farm.backends.onnxruntime import layers_from_profile

    if_model(tmp_path / "if.onnx")
    feeds = {"x": np.ones((16, 16), np.float32), "c": np.array(True)}
    opts = ort.SessionOptions()
    opts.enable_profiling, opts.profile_file_prefix, opts.intra_op_num_threads = True, str(tmp_path / "p"), 1
    session = ort.InferenceSession(str(tmp_path / "if.onnx"), opts, providers=["CPUExecutionProvider"])
    for _ in range(4):
        session.run(None, feeds)
    events = json.loads(Path(session.end_profiling()).read_text())
    layers = {layer.name: layer for layer in layers_from_profile(events, onnx.load(tmp_path / "if.onnx"), 1)}
    assert set(layers) == {"the_if", "then_matmul", "then_act"} and all(layer.kind == "graph op"
                                                                       for layer in layers.values())
    raw_if_ms = [e["dur"] / 1000 for e in sorted((e for e in events if e["name"] == "the_if_kernel_time"),
                                                 key=lambda e: e["ts"])][1:]  # the first run is skipped
    for run, raw in enumerate(raw_if_ms):
        rows = sum(layer.times_ms[run] for layer in layers.values())
        assert rows == pytest.approx(raw)  # each microsecond once: the If's own time + its body's
    assert all(t <= raw for t, raw in zip(layers["the_if"].times_ms, raw_if_ms))


def test_control_flow_subtracts_only_the_events_directly_inside_it() -> None:
    """Nested control flow: a Loop inside an If; each row keeps its own time, each node's time
    within a run is summed over its executions (the Loop body runs twice per run)."""
    from farm.backends.onnxruntime import layers_from_profile

    def node(name: str, ts: int, dur: int, op: str) -> dict:
        return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur, "tid": 1,
                "args": {"op_name": op, "provider": "CPUExecutionProvider"}}

    events = [{"cat": "Session", "name": "model_run", "ts": 0, "dur": 1000},
              node("if", 10, 900, "If"), node("loop", 20, 600, "Loop"),
              node("body_mm", 30, 200, "MatMul"), node("body_mm", 300, 250, "MatMul"),
              node("after", 700, 100, "Relu"), node("outside", 950, 40, "Add")]
    layers = {layer.name: layer.times_ms for layer in layers_from_profile(events, None, 0)}
    assert layers == {"if": pytest.approx([0.2]), "loop": pytest.approx([0.15]), "body_mm": pytest.approx([0.45]),
                      "after": pytest.approx([0.1]), "outside": pytest.approx([0.04])}
    assert sum(t[0] for t in layers.values()) == pytest.approx(0.9 + 0.04)


# --- CUDA execution provider: what runs without a GPU ------------------------------------------

def test_options_are_validated() -> None:
    from farm.backends.registry import option_grid

    grid = option_grid("onnxruntime", {"device": "cuda", "cuda_graph": [False, True]})
    assert [g["cuda_graph"] for g in grid] == [False, True] and grid[0]["device"] == "cuda"
    for bad, key in (({"device": "gpu"}, "device"), ({"trt_builder_optimization_level": 6}, "trt_builder"),
                     ({"cudnn_conv_algo_search": "FAST"}, "cudnn_conv_algo_search"), ({"use_tf32": 1}, "use_tf32")):
        with pytest.raises(ValueError, match=key):
            option_grid("onnxruntime", bad)


def test_what_each_provider_runs() -> None:
    cls = backend_class("onnxruntime")
    assert cls.device_kind({}) == "cpu" and cls.device_kind({"device": "cuda"}) == "cuda"
    cuda, trt = {"device": "cuda"}, {"device": "cuda", "provider": "tensorrt"}
    assert [p for p in ("fp32", "tf32", "fp16", "bf16", "int8") if cls.unsupported_reason(p, cuda) is None] == \
        ["fp32", "tf32", "fp16", "int8"]  # int8: the Q/DQ model as far as the CUDA EP's kernels go
    assert "bf16 is not supported" in cls.unsupported_reason("bf16", cuda)
    assert [p for p in ("fp32", "tf32", "fp16", "bf16", "int8") if cls.unsupported_reason(p, trt) is None] == \
        ["tf32", "fp16", "int8"]
    assert "TF32" in cls.unsupported_reason("fp32", trt)  # TensorRT's fp32 is TF32: never stored as fp32
    # options of the GPU on a CPU cell: unsupported (not a duplicate CPU cell), saying which
    assert "cuda_graph" in cls.unsupported_reason("fp32", {"cuda_graph": True})
    assert "provider" in cls.unsupported_reason("fp32", {"provider": "tensorrt"})
    assert "tf32" in cls.unsupported_reason("tf32", {})


def test_provider_options_follow_the_precision(tmp_path: Path) -> None:
    from farm.backends.onnxruntime import OnnxRuntimeOptions
    from farm.backends.onnxruntime.cuda import provider_list

    options = OnnxRuntimeOptions(device="cuda", cuda_graph=True, cudnn_conv_algo_search="HEURISTIC")
    [(name, cuda)] = provider_list(options, "fp32", 1234, tmp_path)
    assert name == "CUDAExecutionProvider" and cuda["use_tf32"] == "0"  # fp32 is true FP32 on the CUDA EP
    assert cuda["user_compute_stream"] == "1234" and cuda["enable_cuda_graph"] == "1"
    assert cuda["cudnn_conv_algo_search"] == "HEURISTIC"
    assert provider_list(options, "tf32", 1, tmp_path)[0][1]["use_tf32"] == "1"
    # fp16 keeps ONNX Runtime's default: with TF32 off its fp16 ResNet-50 ran 10 % slower than ORT's own setup
    assert provider_list(options, "fp16", 1, tmp_path)[0][1]["use_tf32"] == "1"
    trt_options = options.model_copy(update={"provider": "tensorrt"})
    (trt_name, trt), (fallback, rest) = provider_list(trt_options, "fp16", 1, tmp_path)
    assert (trt_name, fallback) == ("TensorrtExecutionProvider", "CUDAExecutionProvider")
    assert trt["trt_fp16_enable"] == "1" and trt["trt_int8_enable"] == "0" and trt["trt_cuda_graph_enable"] == "1"
    assert rest["enable_cuda_graph"] == "0" and trt["user_compute_stream"] == "1"


def _cuda_ep_here() -> bool:
    import onnxruntime

    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


@pytest.mark.skipif(_cuda_ep_here(), reason="this onnxruntime has the CUDA EP: the GPU run is the test")
@pytest.mark.parametrize("options", [{"device": "cuda"}, {"device": "cuda", "provider": "tensorrt"}])
def test_cuda_cells_are_skipped_with_how_to_get_them(tmp_path: Path, options: dict) -> None:
    tiny_cnn(tmp_path / "tiny.onnx")
    cell = make_cell(tmp_path, "tiny.onnx", precision="tf32" if "provider" in options else "fp32")
    cell = dataclasses.replace(cell, options=options, device_kind="cuda",
                               unsupported_reason=backend_class("onnxruntime").unsupported_reason(cell.precision,
                                                                                                  options))
    result = run_cell(cell, tmp_path / "cache")
    assert result.status == "skipped" and "pip install 'farm[gpu]'" in result.reason, result.reason
    assert result.build is None and result.traceback is None


def test_tensorrt_ep_reason_names_what_is_missing() -> None:
    from farm.backends.onnxruntime.cuda import tensorrt_ep_reason

    reason = tensorrt_ep_reason()
    if _cuda_ep_here() and reason is None:
        pytest.skip("TensorRT and ONNX Runtime's TensorRT EP load here")
    assert "TensorRT" in reason and ("farm[gpu]" in reason or "libnvinfer" in reason)


class HostEvents:
    """farm.device_timer's event operations on the host clock: the CUDA events' stand-in on a CPU."""

    def event(self) -> list[float]:
        return [0.0]

    def record(self, event: list[float], stream) -> None:
        event[0] = time.perf_counter()

    def wait(self, event) -> None:
        pass

    def elapsed_ms(self, start: list[float], end: list[float]) -> float:
        return (end[0] - start[0]) * 1e3


class HostMemory:
    """farm.backends.onnxruntime.cuda.DeviceMemory with OrtValues on the CPU: the binding code runs for real
    on ONNX Runtime."""

    device_type, stream, stream_handle = "cpu", None, 0

    def __init__(self) -> None:
        self.events, self.copies = HostEvents(), []

    def pinned(self, array: np.ndarray) -> np.ndarray:
        return np.array(array)

    def h2d(self, value, host: np.ndarray) -> None:
        self.copies.append("h2d")
        value.update_inplace(host)

    def d2h(self, host: np.ndarray, value) -> None:
        self.copies.append("d2h")
        host[...] = value.numpy()

    def synchronize(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_bound_session_binds_copies_and_times_on_the_cpu(tmp_path: Path) -> None:
    """The CUDA cells' I/O binding (inputs copied into bound OrtValues, outputs bound at fixed addresses
    and copied back) and their H2D / compute / D2H split, on ONNX Runtime's CPU EP."""
    import onnxruntime as ort

    from farm.backends.onnxruntime.cuda import BoundSession

    tiny_cnn(tmp_path / "tiny.onnx")
    session = ort.InferenceSession(str(tmp_path / "tiny.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}
    memory = HostMemory()
    bound = BoundSession(session, memory, feeds, ort.RunOptions())
    [(name, value, host)] = bound.outputs
    address = value.data_ptr()
    phases = bound.query_fn(transfers=True)()
    assert phases.h2d_ms >= 0 and phases.compute_ms > 0 and phases.d2h_ms >= 0
    assert host == pytest.approx(session.run(None, feeds)[0], rel=1e-5)  # D2H brought the outputs back
    other = {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}
    assert bound.outputs_for(other)[name] == pytest.approx(session.run(None, other)[0], rel=1e-5)
    assert bound.outputs[0][1].data_ptr() == address  # fixed addresses: what a CUDA graph replays
    memory.copies.clear()
    phases = bound.query_fn(transfers=False)()
    assert memory.copies == [] and phases.h2d_ms is None and phases.d2h_ms is None and phases.compute_ms > 0
    with pytest.raises(ValueError, match="shape"):
        bound.outputs_for({"x": np.zeros((1, 3, 8, 8), np.float32)})
    bound.close()


def test_a_session_says_which_provider_ran_each_node_and_a_device_session_with_none_on_it_is_refused(
        tmp_path: Path) -> None:
    """The build row names the nodes per execution provider as ONNX Runtime assigned them (read from
    the session); a device session whose every node went to the CPU provider is not that device's
    engine, and one with a few there names them. Here on CPU sessions, as ONNX Runtime makes them."""
    import onnxruntime as ort

    from farm.backends.onnxruntime import placement
    from farm.queries import placement_note_sql

    tiny_cnn(tmp_path / "tiny.onnx", channels=4, spatial=8)
    backend = backend_class("onnxruntime")({"graph_optimization": "extended"})
    feeds = {"x": np.ones((2, 3, 8, 8), np.float32)}
    stats = backend.build(standalone_request(tmp_path / "tiny.onnx", feeds, "fp32", tmp_path), feeds)
    assert stats.provider_nodes is not None and stats.provider_nodes.startswith("CPUExecutionProvider ")
    assert 0 < int(stats.provider_nodes.split()[-1]) <= stats.layers_before_fusion
    assert stats.cpu_provider_nodes is None  # a CPU cell: nothing fell back
    backend.close()

    opts = ort.SessionOptions()
    assert placement.record(opts)
    session = ort.InferenceSession(str(tmp_path / "tiny.onnx"), opts, providers=["CPUExecutionProvider"])
    placed = placement.assignment(session)
    reason = placement.all_on_cpu_reason(placed, "CUDAExecutionProvider")
    assert reason.startswith("every node of the model (") and "none on CUDAExecutionProvider" in reason
    assert 'device = "cpu"' in reason
    mixed = {"CUDAExecutionProvider": placed["CPUExecutionProvider"], "CPUExecutionProvider": Counter(Shape=3, NonZero=1)}
    assert placement.all_on_cpu_reason(mixed, "CUDAExecutionProvider") is None
    facts = placement.build_facts(mixed, device=True)
    assert facts["cpu_provider_nodes"] == 4 and facts["cpu_provider_ops"] == "Shape ×3, NonZero"

    import duckdb

    columns = ["provider_nodes", "cpu_provider_nodes", "cpu_provider_ops", "cpu_provider_node_ms"]
    note = duckdb.sql(f"SELECT {placement_note_sql(columns)} FROM (SELECT 'CUDAExecutionProvider 5, "
                      "CPUExecutionProvider 4' AS provider_nodes, 4 AS cpu_provider_nodes, 'Shape ×3, NonZero' AS "
                      "cpu_provider_ops, 0.25 AS cpu_provider_node_ms) b").fetchall()[0][0]
    assert note.startswith("4 nodes ran on ONNX Runtime's CPU provider (Shape ×3, NonZero, 0.25 ms a run as profiled)")
    assert duckdb.sql(f"SELECT {placement_note_sql(columns[:1])}").fetchall()[0][0] is None  # an older warehouse


def test_the_cpu_providers_time_per_run_comes_from_a_real_profile(tmp_path: Path) -> None:
    import json

    import onnxruntime as ort

    from farm.backends.onnxruntime.placement import cpu_node_ms

    tiny_cnn(tmp_path / "tiny.onnx", channels=4, spatial=8)
    opts = ort.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(tmp_path / "profile")
    session = ort.InferenceSession(str(tmp_path / "tiny.onnx"), opts, providers=["CPUExecutionProvider"])
    for _ in range(3):
        session.run(None, {"x": np.ones((2, 3, 8, 8), np.float32)})
    events = json.loads(Path(session.end_profiling()).read_text())
    per_run = cpu_node_ms(events)
    total = sum(e["dur"] for e in events if e.get("cat") == "Session" and e.get("name") == "model_run") / 1000 / 3
    assert 0 < per_run <= total  # the nodes' time, within each run's
    assert cpu_node_ms([e for e in events if e.get("name") != "model_run"]) is None



def test_an_output_of_another_rank_than_declared_is_copied_from_where_onnx_runtime_puts_it(tmp_path: Path) -> None:
    """A model that declares an output [n, seqlen] and produces [n, 1, seqlen] (ddddocr's OCR model):
    ONNX Runtime's CUDA EP refused a bound buffer of the produced rank ("Invalid rank for output", on
    an H200), so that output stays allocated by ONNX Runtime and is copied from there. The CPU EP
    merges such shapes leniently, so here the path is checked (which output is loose, what comes
    back), not the refusal."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from farm.backends.onnxruntime.cuda import BoundSession

    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    graph = helper.make_graph([helper.make_node("Unsqueeze", ["x", "axes"], ["y"])], "rank",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "seqlen"])], [axes])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    onnx.save(proto, tmp_path / "rank.onnx")
    session = ort.InferenceSession(str(tmp_path / "rank.onnx"), providers=["CPUExecutionProvider"])
    feeds = {"x": np.arange(8, dtype=np.float32).reshape(2, 4)}
    bound = BoundSession(session, HostMemory(), feeds, ort.RunOptions())
    assert bound.loose == [0]
    phases = bound.query_fn(transfers=True)()
    assert phases.compute_ms > 0 and phases.d2h_ms >= 0
    np.testing.assert_array_equal(bound.outputs[0][2], feeds["x"][:, None, :])
    other = {"x": -feeds["x"]}
    np.testing.assert_array_equal(bound.outputs_for(other)["y"], other["x"][:, None, :])


class StaleCopyMemory(HostMemory):
    """Copies into the bound inputs that ONNX Runtime never reads: what its CUDA EP does to an input
    a CPU node consumes (copied across devices when bound, not when run; ddddocr's OCR model on an H200)."""

    def h2d(self, value, host: np.ndarray) -> None:
        self.copies.append("h2d")


def test_accuracy_outputs_follow_their_inputs_whatever_the_binding_copied(tmp_path: Path) -> None:
    """The accuracy check's outputs of a session that replays no CUDA graph come from ONNX Runtime's
    own copies: a bound input that ONNX Runtime copied once, when bound, cannot give every later
    input the first one's outputs."""
    import onnxruntime as ort

    from farm.backends.onnxruntime.cuda import BoundSession

    tiny_cnn(tmp_path / "tiny.onnx")
    session = ort.InferenceSession(str(tmp_path / "tiny.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}
    bound = BoundSession(session, StaleCopyMemory(), feeds, ort.RunOptions())
    for _ in range(2):
        other = {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}
        [(name, got)] = bound.outputs_for(other).items()
        assert got == pytest.approx(session.run(None, other)[0], rel=1e-5)


def test_a_scalar_input_is_bound_as_a_scalar(tmp_path: Path) -> None:
    """An int64 scalar input (silero-vad's sample rate) keeps its shape () through the binding, so
    the accuracy check's feeds match it (it was made 1-D: 'input sr: shape (), the cell runs (1,)')."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from farm.backends.onnxruntime.cuda import BoundSession

    graph = helper.make_graph([helper.make_node("Cast", ["sr"], ["rate"], to=TensorProto.FLOAT),
                               helper.make_node("Mul", ["x", "rate"], ["y"])], "scalar",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
                               helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    onnx.save(proto, tmp_path / "scalar.onnx")
    session = ort.InferenceSession(str(tmp_path / "scalar.onnx"), providers=["CPUExecutionProvider"])
    feeds = {"x": np.ones((2, 4), np.float32), "sr": np.array(16000, np.int64)}
    bound = BoundSession(session, HostMemory(), feeds, ort.RunOptions())
    assert {name: host.shape for name, _, host in bound.inputs} == {"x": (2, 4), "sr": ()}
    np.testing.assert_array_equal(bound.outputs_for({"x": feeds["x"], "sr": np.array(8000)})["y"],
                                  np.full((2, 4), 8000, np.float32))


@pytest.mark.parametrize("message", [
    # ONNX Runtime 1.31's words on an H200 (benchmarks/model_corpus.py: yolov8n-nudenet fp16, silero-vad)
    "[ONNXRuntimeError] : 1 : FAIL : This session cannot use the graph capture feature as requested by the user  "
    "as all compute graph nodes have not been partitioned to the CUDAExecutionProvider",
    "[ONNXRuntimeError] : 1 : FAIL : This session cannot use the graph capture feature as requested by the user as "
    "the model has control flow nodes which can't be supported by CUDAExecutionProvider",
])
def test_a_graph_onnx_runtime_cannot_capture_is_unsupported(message: str) -> None:
    from farm.backends.onnxruntime.cuda import raise_if_uncapturable
    from farm.errors import EngineUnsupported

    with pytest.raises(EngineUnsupported) as info:
        raise_if_uncapturable(RuntimeError(message))
    assert str(info.value).startswith("ONNX Runtime cannot capture this model in a CUDA graph ([ONNXRuntimeError]")
    assert str(info.value).endswith("run it with cuda_graph = false")
    raise_if_uncapturable(RuntimeError("CUDA out of memory"))  # anything else is left to fail as it is
    with pytest.raises(EngineUnsupported) as info:  # the nodes a session without the graph gave the CPU, where known
        raise_if_uncapturable(RuntimeError(message), "2 of 318 nodes (QuantizeLinear ×2)")
    assert str(info.value).endswith("; 2 of 318 nodes (QuantizeLinear ×2) run on the CPU provider, which a CUDA "
                                    "graph cannot hold: run it with cuda_graph = false")
