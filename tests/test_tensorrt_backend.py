"""The TensorRT backend's build and run path on a recording double that knows only the documented
API; real TensorRT runs are behind `pytest -m tensorrt` and skip cleanly where it is absent."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from farm.cell_runner import run_cell
from farm.config import load_config
from farm.plan import plan_sweep
from tests.conftest import stored_timing, tiny_cnn, unsupported_op_model, write_sweep
from tests.doubles.tensorrt_double import EXTRA_NAMES, Recorder, make_cudart, make_tensorrt

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "tensorrt-reference.md"


@pytest.fixture
def double(monkeypatch):
    """Install the double as `tensorrt` and `cuda.bindings.runtime`; returns a factory per version."""

    def install(version: str = "10.13.0"):
        recorder = Recorder()
        trt = make_tensorrt(version, recorder)
        runtime = make_cudart(recorder)
        cuda = types.ModuleType("cuda")
        bindings = types.ModuleType("cuda.bindings")
        bindings.runtime, cuda.bindings = runtime, bindings
        for name, module in {"tensorrt": trt, "cuda": cuda, "cuda.bindings": bindings,
                             "cuda.bindings.runtime": runtime}.items():
            monkeypatch.setitem(sys.modules, name, module)
        return recorder

    return install


SWEEP = """
name = "trt"
[[models]]
source = "MODEL"
[axes]
precisions = ["fp32", "bf16", "int8"]
batch_sizes = [2]
backends = ["tensorrt"]
[profiles.small]
batch = "1-2-4"
[backends.tensorrt]
OPTIONS
"""


def cells(tmp_path: Path, model: str = "tiny.onnx", options: str = "") -> list:
    if model == "tiny.onnx":
        tiny_cnn(tmp_path / model)
    body = SWEEP.replace("MODEL", model).replace("OPTIONS", options)
    return plan_sweep(load_config(write_sweep(tmp_path, body)), tmp_path / "cache").cells


def test_build_and_run_on_tensorrt_10(double, tmp_path: Path) -> None:
    calls = double("10.13.0")
    fp32, bf16, _ = cells(tmp_path)
    assert fp32.profile.name == "small" and fp32.device_kind == "cuda"
    assert "strongly typed" in bf16.unsupported_reason
    result = run_cell(fp32, tmp_path / "cache")
    assert result.status == "ok", result.traceback
    assert calls.find("create_network") == [(1 << 0,)]  # STRONGLY_TYPED on 10.x
    assert calls.find("set_shape") == [("x", (1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))]  # the sweep's profile
    assert [f.name for (f,) in calls.find("clear_flag")] == ["TF32"]  # true FP32
    assert calls.find("build_serialized_network") == [([],)]  # built with no flag left on
    assert calls.find("set_input_shape") == [("x", (2, 3, 8, 8))]
    assert calls.names().count("cudaMemcpyAsync") >= 2 * result.measurement["queries"]  # H2D + D2H every query
    m = result.measurement
    assert m["h2d_mean_ms"] == m["compute_mean_ms"] == m["d2h_mean_ms"] == 0.25  # the double's event times
    assert result.build.layers_before_fusion == 5 and result.build.layers_after_fusion == 5
    assert result.build.builder_peak_memory_bytes == 42 * 2**20  # read from the builder's log line
    assert [layer.name for layer in result.layers] == ["conv", "relu", "pool", "flatten", "fc"]
    assert all(len(layer.times_ms) == fp32.measurement.layer_iterations for layer in result.layers)
    assert result.device["name"] == "Double GPU" and result.device["uuid"].startswith("GPU-00010203")
    # what its latency includes: copies, no CUDA graph, waits on default-flag events (trtexec's spin wait)
    assert (m["latency_includes_transfers"], m["timing_cuda_graph"], m["timing_spin_wait"], m["timing_streams"],
            m["timing_engine_version"]) == (True, False, True, 1, "TensorRT 10.13.0")
    timing = list((tmp_path / "cache" / "tensorrt").glob("timing-*.cache"))
    engines = list((tmp_path / "cache" / "tensorrt" / "engines").glob("*.plan"))
    assert len(timing) == 1 and len(engines) == 1

    # a second run of the same cell reuses the engine: no build, a cache hit
    before = calls.names().count("build_serialized_network")
    again = run_cell(fp32, tmp_path / "cache")
    assert again.status == "ok" and again.build.cache_hits == 1
    assert calls.names().count("build_serialized_network") == before


def test_timing_cache_is_merged_back(double, tmp_path: Path) -> None:
    calls = double()
    fp32 = cells(tmp_path, options="engine_cache = false")[0]
    run_cell(fp32, tmp_path / "cache")
    run_cell(fp32, tmp_path / "cache")
    loaded = [blob for (blob,) in calls.find("create_timing_cache")]
    assert loaded[0] == b"" and any(blob for blob in loaded[1:])  # the second build starts from the first's cache
    assert calls.find("combine")


def test_builder_options_reach_the_config(double, tmp_path: Path) -> None:
    calls = double()
    options = ('builder_optimization_level = 5\nworkspace_mib = 512\nhardware_compatibility = "ampere_plus"\n'
               'version_compatible = true\nsparsity = true\ntactic_sources = "CUBLAS_LT,JIT_CONVOLUTIONS"')
    result = run_cell(cells(tmp_path, options=options)[0], tmp_path / "cache")
    assert result.status == "ok", result.traceback
    assert calls.find("set_memory_pool_limit")[0][1] == 512 * 2**20
    assert {f.name for (f,) in calls.find("set_flag")} == {"VERSION_COMPATIBLE", "SPARSE_WEIGHTS"}
    assert calls.find("set_tactic_sources") == [((1 << 1) | (1 << 4),)]


def test_tensorrt_11(double, tmp_path: Path) -> None:
    calls = double("11.1.0")
    fp32 = cells(tmp_path)[0]
    assert run_cell(fp32, tmp_path / "cache").status == "ok"
    assert calls.find("create_network") == [(0,)]  # always strongly typed; no flag to pass
    # 11.x has no CUBLAS tactic source and no precision flags: clear failures, not crashes
    cublas = run_cell(cells(tmp_path, options='tactic_sources = "CUBLAS"\nengine_cache = false')[0],
                      tmp_path / "cache")
    assert cublas.status == "failed" and "tactic source CUBLAS does not exist in TensorRT 11.1.0" in cublas.reason
    bf16 = cells(tmp_path, options="precision_flags = true\nengine_cache = false")[1]
    assert bf16.unsupported_reason is None
    result = run_cell(bf16, tmp_path / "cache")
    assert result.status == "failed" and "TensorRT 11 has no precision flags" in result.reason


def test_precision_flags_on_10(double, tmp_path: Path) -> None:
    calls = double("10.13.0")
    bf16 = cells(tmp_path, options="precision_flags = true")[1]
    assert run_cell(bf16, tmp_path / "cache").status == "ok"
    assert calls.find("create_network") == [(0,)]  # weakly typed, so the flag is allowed
    assert [f.name for (f,) in calls.find("set_flag")] == ["BF16"]


def test_int8_comes_from_the_qdq_onnx(double, tmp_path: Path) -> None:

    calls = double()
    int8 = cells(tmp_path)[2]
    assert int8.unsupported_reason is None
    result = run_cell(int8, tmp_path / "cache")
    assert result.status == "ok", result.traceback
    (path,) = calls.find("parse_from_file")[0]
    # the transformed model, not the fp32 file, its int32 biases folded for TensorRT's parser in a copy in
    # the cell's work folder (removed with it; tests/test_tensorrt_qdq.py checks such a copy)
    assert path.endswith("/model.tensorrt-qdq.onnx")
    assert result.build.transform_summary.startswith("int8: ") and "int32 bias DequantizeLinear folded" in \
        result.build.transform_summary
    assert "seeded synthetic data" in result.build.calibration


def test_several_profiles_in_one_engine(double, tmp_path: Path) -> None:
    calls = double()
    tiny_cnn(tmp_path / "tiny.onnx")
    body = ('[[models]]\nsource = "tiny.onnx"\n[axes]\nbatch_sizes = [2]\nbackends = ["tensorrt"]\n'
            '[profiles.small]\nbatch = "1-2-4"\n[profiles.large]\nbatch = "2-16-32"\n'
            '[backends.tensorrt]\nprofiles_in_engine = "all"\n')
    small, large = plan_sweep(load_config(write_sweep(tmp_path, body)), tmp_path / "cache").cells
    assert (small.profile.name, large.profile.name) == ("small", "large")
    for cell in (small, large):
        assert run_cell(cell, tmp_path / "cache").status == "ok"
    profiles = calls.find("add_optimization_profile")
    assert [p[0]["x"][2] for p in profiles] == [(4, 3, 8, 8), (32, 3, 8, 8)]  # both in the engine, in order
    assert len(calls.find("build_serialized_network")) == 1  # the second cell reused the same engine
    assert [i for i, _ in calls.find("set_optimization_profile_async")] == [0, 1]  # each cell its own


def test_several_streams(double, tmp_path: Path, monkeypatch) -> None:
    from farm.backends.tensorrt import TensorRTBackend

    calls = double()
    outputs_calls = []
    real_outputs = TensorRTBackend.outputs
    monkeypatch.setattr(TensorRTBackend, "outputs",
                        lambda self, feeds: outputs_calls.append(1) or real_outputs(self, feeds))
    cell = cells(tmp_path, options="streams = 3")[0]
    result = run_cell(cell, tmp_path / "cache")
    assert result.status == "ok", result.traceback
    queries = result.measurement["queries"]
    contexts = calls.names().count("create_execution_context")
    assert contexts == 3
    # every timed query enqueued on each of the 3 streams (the accuracy check's output runs and the
    # profiling run add their own, one enqueue each)
    assert calls.names().count("execute_async_v3") == 3 * (queries + result.samples.warmup_queries) + \
        len(outputs_calls) + cell.measurement.layer_iterations
    assert result.measurement["timing_streams"] == 3
    walltime_s = result.measurement["host_walltime_ms"] / 1e3
    assert result.measurement["throughput_qps"] == pytest.approx(3 * queries / walltime_s)


@pytest.mark.parametrize("capture_fails", [False, True])
def test_the_timing_definition_says_what_ran(double, tmp_path: Path, monkeypatch, capture_fails: bool) -> None:
    """A CUDA graph only where the capture worked (a failed one runs without, as trtexec does)."""
    from farm.cuda import CudaRuntime

    double("11.1.0")
    if capture_fails:
        def instantiate(self, graph):
            raise RuntimeError("cudaGraphInstantiate failed")
        monkeypatch.setattr(CudaRuntime, "instantiate", instantiate)
    cell = cells(tmp_path, options="cuda_graph = true\ntransfers = false")[0]
    result = run_cell(cell, tmp_path / "cache")
    assert result.status == "ok", result.traceback
    row = stored_timing(tmp_path / "results", cell, result)
    assert row == (False, not capture_fails, True, 1, "TensorRT 11.1.0")


def test_parser_errors_are_surfaced_per_node(double, tmp_path: Path) -> None:
    double()
    unsupported_op_model(tmp_path / "bad.onnx")
    body = SWEEP.replace("MODEL", "bad.onnx").replace("OPTIONS", "").replace('[profiles.small]\nbatch = "1-2-4"', "")
    cell = plan_sweep(load_config(write_sweep(tmp_path, body)), tmp_path / "cache").cells[0]
    result = run_cell(cell, tmp_path / "cache")
    assert result.status == "failed"
    assert "ONNX parser rejected the model: In node 0 (mystery): UNSUPPORTED_NODE" in result.reason


def test_without_tensorrt_cells_are_skipped_with_how_to_install(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # as where TensorRT is not installed
    result = run_cell(cells(tmp_path)[0], tmp_path / "cache")
    assert result.status == "skipped" and "TensorRT is not installed here" in result.reason
    assert "pip install tensorrt-cu12" in result.reason


def test_every_tensorrt_name_the_backend_uses_is_documented() -> None:
    reference = REFERENCE.read_text()
    source = "\n".join(path.read_text() for path in sorted((ROOT / "farm" / "backends" / "tensorrt").glob("*.py")))
    assert "execute_async_v3" in source and "build_serialized_network" in source
    used = set()
    for chain in re.findall(r"\btrt\.([A-Za-z_][\w.]*)", source):
        used.update(part for part in chain.split(".") if part not in ("__version__",))
    objects = r"(?:config|builder|network|parser|context|engine|inspector|runtime|profile|cache)"
    used.update(re.findall(rf"(?<![.\w]){objects}\.([A-Za-z_]\w*)", source))
    undocumented = sorted(n for n in used if n not in reference and n not in EXTRA_NAMES)
    assert not undocumented, f"TensorRT names used but not in tensorrt-reference.md: {undocumented}"


@pytest.mark.tensorrt
def test_real_tensorrt_on_a_gpu(tmp_path: Path) -> None:
    """Runs only where TensorRT and a GPU exist: `pytest -m tensorrt`."""
    pytest.importorskip("tensorrt")
    from farm.backends.tensorrt import TensorRTBackend

    reason = TensorRTBackend({}).unavailable_reason()
    if reason:
        pytest.skip(reason)
    result = run_cell(cells(tmp_path)[0], tmp_path / "cache")
    assert result.status == "ok", result.traceback
    assert result.measurement["compute_median_ms"] > 0 and result.layers


def test_profile_batch_range_goes_on_the_batch_axis_wherever_it_is(double, tmp_path: Path) -> None:
    """An LSTM state [2, B, 128]: the profile's batch range is set on axis 1, axis 0 stays 2."""
    from tests.test_inputs import HIDDEN, lstm_model

    calls = double("10.13.0")
    lstm_model(tmp_path / "lstm.onnx")
    fp32 = cells(tmp_path, model="lstm.onnx")[0]
    run_cell(fp32, tmp_path / "cache")
    assert calls.find("set_shape") == [("x", (1, 16), (2, 16), (4, 16)),
                                       ("state", (2, 1, HIDDEN), (2, 2, HIDDEN), (2, 4, HIDDEN))]
