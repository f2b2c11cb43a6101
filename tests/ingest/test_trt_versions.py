"""trtexec output of TensorRT 7.x to 11.x read by each version's rules (farm/trt_output/versions.py).

Two kinds of input:
- fixtures in written_from_docs/ (see its README): written by hand from each version's output format
  as trtexec's source prints it; their figures are not TensorRT's.
- short excerpts of public trtexec output, transcribed below with their source named; every figure
  they state is checked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from farm.cli import main
from farm.ingest.sniff import detect_kind
from farm.trt_output import (
    LogFactsFromTrtexecLog,
    LogRunsFromTrtexecLog,
    MeasurementFromSummary,
    TimingFromLog,
    fill_weights,
    strip_prefix,
    summary_definition,
)
from farm.warehouse import Warehouse

DOCS = Path(__file__).resolve().parent / "written_from_docs"


def ingest(tmp_path: Path, *files: Path, extra: tuple[str, ...] = ()) -> tuple[int, Path]:
    results = tmp_path / "results"
    return main(["ingest", *map(str, files), "--results", str(results), *extra]), results


def measurement(results: Path, where: str = "") -> dict:
    con = Warehouse(results).connect()
    cur = con.execute("SELECT c.model, c.batch, m.* FROM measurements m JOIN cells c USING (cell_id) " + where +
                      " ORDER BY c.model")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def excerpt(text: str, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(line.strip() for line in text.strip().splitlines()) + "\n")
    return path


# --- 7.x --------------------------------------------------------------------------------------------

def test_7x_implicit_batch_throughput_is_samples_and_is_divided_by_the_batch(tmp_path: Path) -> None:
    facts = LogFactsFromTrtexecLog((DOCS / "trt7_implicit_batch.log").read_text())
    assert (facts.tensorrt_version, facts.layout_major, facts.inference_batch) == (None, 7, 8)
    code, results = ingest(tmp_path, DOCS / "trt7_implicit_batch.log")
    assert code == 0
    (row,) = measurement(results)
    assert row["batch"] == 8
    assert row["throughput_samples_per_s"] == pytest.approx(6396.8)  # as printed: batch x queries / walltime
    assert row["throughput_qps"] == pytest.approx(6396.8 / 8) and row["queries"] == 2400 // 8
    assert row["host_walltime_ms"] == pytest.approx(3001.5)
    assert (row["latency_min_ms"], row["latency_mean_ms"], row["latency_median_ms"], row["latency_p99_ms"],
            row["latency_max_ms"]) == (9.75, 9.9, 9.875, 10.75, 11.5)
    assert (row["compute_mean_ms"], row["compute_median_ms"], row["compute_p99_ms"]) == (9.5, 9.5, 10.25)
    assert row["enqueue_median_ms"] == 0.5 and row["enqueue_mean_ms"] is None  # 7.x prints no enqueue mean
    assert row["latency_p90_ms"] is None and row["h2d_mean_ms"] is None
    # 7.0/7.1 print no "Data transfers" option: they cannot skip the copies
    assert row["latency_includes_transfers"] is True and row["timing_cuda_graph"] is False


def test_7x_explicit_batch_zeros_are_null_and_runs_are_cells(tmp_path: Path) -> None:
    runs = LogRunsFromTrtexecLog((DOCS / "trt7_explicit_two_runs.log").read_text().splitlines())
    assert len(runs) == 2 and [r.summary["latency"]["min"] for r in runs] == [2.0, 1.875]
    with pytest.raises(ValueError, match="2 trtexec runs"):
        LogFactsFromTrtexecLog((DOCS / "trt7_explicit_two_runs.log").read_text())
    code, results = ingest(tmp_path, DOCS / "trt7_explicit_two_runs.log")
    assert code == 0
    rows = measurement(results)
    assert [r["model"] for r in rows] == ["trt7_explicit_two_runs.run1", "trt7_explicit_two_runs.run2"]
    for row, walltime, fastest in zip(rows, (3062.5, 3125.0), (2.0, 1.875)):
        # "throughput: 0 qps" and "Timing trace has 0 queries": explicit batch is inference batch 0 in 7.x
        assert row["throughput_qps"] is None and row["throughput_samples_per_s"] is None and row["queries"] is None
        assert row["host_walltime_ms"] == walltime and row["latency_min_ms"] == fastest
        assert (row["latency_median_ms"], row["compute_mean_ms"], row["enqueue_median_ms"]) == (2.25, 2.0, 0.375)
        assert row["latency_includes_transfers"] is True  # "Data transfers: Enabled" (7.2)


def test_a_run_is_picked_with_run_and_a_multi_run_log_with_other_files_is_refused(tmp_path: Path, capsys) -> None:
    code, results = ingest(tmp_path, DOCS / "trt7_explicit_two_runs.log", extra=("--run", "2"))
    assert code == 0 and [r["latency_min_ms"] for r in measurement(results)] == [1.875]
    code, _ = ingest(tmp_path / "b", DOCS / "trt7_explicit_two_runs.log", extra=("--run", "3"))
    assert code == 2 and "holds 2 trtexec runs" in capsys.readouterr().err
    code, _ = ingest(tmp_path / "c", DOCS / "trt7_explicit_two_runs.log", DOCS / "trt7_implicit_batch.log")
    assert code == 2 and "--run N" in capsys.readouterr().err


def test_7x_export_times_keys(tmp_path: Path) -> None:
    """7.x --exportTimes names the copies "in"/"out" (sampleReporting.cpp exportJSONTrace, 7.1)."""
    records = [{"startEnqMs": i, "endEnqMs": i + 0.1, "startInMs": i, "endInMs": i + 0.1, "startComputeMs": i + 0.1,
                "endComputeMs": i + 0.9, "startOutMs": i + 0.9, "endOutMs": i + 1.0, "inMs": 0.1, "computeMs": 0.8,
                "outMs": 0.1, "latencyMs": 1.0, "endToEndMs": 1.0} for i in range(10)]
    path = tmp_path / "run.times.json"
    path.write_text(json.dumps(records))
    assert detect_kind(path.read_text()) == "times"
    code, results = ingest(tmp_path, path)
    (row,) = measurement(results)
    assert code == 0 and row["queries"] == 10 and row["h2d_median_ms"] == 0.1 and row["d2h_median_ms"] == 0.1
    assert row["host_walltime_ms"] == 10.0


# --- 10.x: several build passes, wrapper prefixes, the name-last profile, TensorRT 10 wording -------

def test_10x_build_figures_come_from_the_engine_pass_only(tmp_path: Path) -> None:
    facts = LogFactsFromTrtexecLog((DOCS / "trt10_multipass_prefixed.log").read_text())
    assert facts.tensorrt_version == "10.16.0" and facts.build_passes == 3
    # pass 1 logged 5 layers with reformats, pass 2 four; the engine (pass 3) has 3
    assert (facts.layers_after_parsing, facts.layers_after_fusion, facts.layers_after_reformat) == (4, 3, 3)
    assert len(facts.layers) == 3 and set(facts.layer_memory) == {layer.name for layer in facts.layers}
    assert (facts.host_persistent_bytes, facts.device_persistent_bytes, facts.scratch_bytes) == (1056, 512, 4096)
    assert facts.layer_memory["{ForeignNode[/act/Relu.../fc2/MatMul]}"] == {
        "host_persistent_bytes": 1024, "device_persistent_bytes": 512, "scratch_bytes": 4096}
    assert (facts.build_s, facts.builder_peak_device_bytes) == (7.25, 9 * 2**20)


def test_10x_device_profile_and_dynamic_batch(tmp_path: Path) -> None:
    facts = LogFactsFromTrtexecLog((DOCS / "trt10_multipass_prefixed.log").read_text())
    assert facts.device == {"name": "NVIDIA H100 PCIe", "uuid": "GPU-00000000-1111-2222-3333-444444444444",
                            "compute_capability": "9.0", "sm_count": 114, "memory_bytes": 81000 * 2**20,
                            "memory_bus_width_bits": 5120, "clock_graphics_mhz": 1755, "clock_memory_mhz": 1593}
    assert facts.profile.count == 11000
    assert [(r.name, r.total_ms, r.average_ms, r.median_ms, r.percentage) for r in facts.profile.rows] == [
        ("/fc1/MatMul", 1100.0, 0.1, 0.1, 50.0), ("{ForeignNode[/act/Relu.../fc2/MatMul]}", 990.0, 0.09, 0.089, 45.0),
        ("Reformatting CopyNode for Output Tensor 0 to {ForeignNode[/act/Relu.../fc2/MatMul]}", 110.0, 0.01, 0.01, 5.0)]
    code, results = ingest(tmp_path, DOCS / "trt10_multipass_prefixed.log")
    assert code == 0
    (row,) = measurement(results)
    assert row["batch"] == 4  # the inference shape x=4x512 of a dynamic-shape engine
    assert row["throughput_qps"] == 3999.67 and row["throughput_samples_per_s"] == pytest.approx(4 * 3999.67)
    assert row["queries"] == 12000 and row["host_walltime_ms"] == pytest.approx(3000.25)
    assert (row["latency_p90_ms"], row["latency_p95_ms"], row["latency_p99_ms"]) == (0.26, 0.27, 0.3)
    assert (row["h2d_mean_ms"], row["compute_median_ms"], row["compute_p99_ms"], row["d2h_median_ms"]) == (
        0.01, 0.225, 0.28, 0.01)
    assert (row["latency_includes_transfers"], row["timing_cuda_graph"], row["timing_spin_wait"],
            row["timing_streams"], row["timing_engine_version"]) == (True, False, False, 1, "TensorRT 10.16.0")
    con = Warehouse(results).connect()
    layers = con.execute("SELECT name, weight_bytes, time_avg_ms, time_median_ms, host_persistent_bytes "
                         "FROM layers ORDER BY layer_index").fetchall()
    assert layers == [
        ("/fc1/MatMul", 512 * 256 * 4, 0.1, 0.1, 32),  # its initializer, as the parser's line states it
        ("{ForeignNode[/act/Relu.../fc2/MatMul]}", None, 0.09, 0.089, 1024),  # Myelin exposes no weights: unknown
        ("Reformatting CopyNode for Output Tensor 0 to {ForeignNode[/act/Relu.../fc2/MatMul]}", 0, 0.01, 0.01, 0)]
    con.execute("SELECT build_s, layers_before_fusion, layers_after_fusion, layers_with_reformats, engine_scratch_bytes "
                "FROM builds")
    assert con.fetchone() == (7.25, 4, 3, 3, 4096)


def test_unexposed_weights_stay_unknown() -> None:
    from farm.trt_output import EngineLayer, Tensor

    layers = [EngineLayer("{ForeignNode[a...b]}", "Myelin", inputs=[Tensor("x", "Float", [1, 4])]),
              EngineLayer("mm", "MatrixMultiply", inputs=[Tensor("x", "Float", [1, 4])]),
              EngineLayer("scale", "Scale", inputs=[Tensor("x", "Float", [1, 4])]),
              EngineLayer("r", "Reformat", inputs=[Tensor("x", "Float", [1, 4])])]
    fill_weights(layers, {})
    assert [layer.weight_bytes for layer in layers] == [None, None, None, 0]


@pytest.mark.parametrize("line", [
    "[INFO] [05/27/2023-10:11:12] [I] Throughput: 12.5 qps",
    "[05/03/2025-10:30:43] [TRT] [I] Throughput: 12.5 qps",
    "INFO:model_navigator.frameworks.tensorrt.utils:Throughput: 12.5 qps",
    "I0511 01:22:37.728144 1 logging.cc:52] Throughput: 12.5 qps",
    "[TensorRT] INFO: Throughput: 12.5 qps",
    "3/07/2022-05:05:52] [I] Throughput: 12.5 qps",
])
def test_known_prefixes_are_tolerated(line: str) -> None:
    assert strip_prefix(line) == "Throughput: 12.5 qps"
    assert detect_kind(line) == "log" and LogFactsFromTrtexecLog(line).throughput_qps == 12.5


# --- public examples (short excerpts of real trtexec output; source named on each) ---------------------

# OE4T/meta-tegra pull request 952 (description): TensorRT 8.4.0 on a Jetson AGX Xavier, trtexec
# --loadEngine=mnist16.trt --batch=16 (an implicit-batch Caffe MNIST engine).
META_TEGRA_952 = """
[03/11/2022-14:57:03] [I] === Performance summary ===
[03/11/2022-14:57:03] [I] Throughput: 41087.7 qps
[03/11/2022-14:57:03] [I] Latency: min = 0.387207 ms, max = 0.447357 ms, mean = 0.402238 ms, median = 0.401947 ms, percentile(99%) = 0.420288 ms
[03/11/2022-14:57:03] [I] Enqueue Time: min = 0.0830078 ms, max = 0.229004 ms, mean = 0.090497 ms, median = 0.0871582 ms, percentile(99%) = 0.126099 ms
[03/11/2022-14:57:03] [I] H2D Latency: min = 0.00622559 ms, max = 0.0571899 ms, mean = 0.0104126 ms, median = 0.00952148 ms, percentile(99%) = 0.0272217 ms
[03/11/2022-14:57:03] [I] GPU Compute Time: min = 0.375977 ms, max = 0.403564 ms, mean = 0.388221 ms, median = 0.388443 ms, percentile(99%) = 0.393188 ms
[03/11/2022-14:57:03] [I] D2H Latency: min = 0.00195312 ms, max = 0.00537109 ms, mean = 0.00360451 ms, median = 0.00366211 ms, percentile(99%) = 0.00488281 ms
[03/11/2022-14:57:03] [I] Total Host Walltime: 3.00119 s
[03/11/2022-14:57:03] [I] Total GPU Compute Time: 2.99202 s
[03/11/2022-14:57:03] [I] Explanations of the performance metrics are printed in the verbose logs.
&&&& PASSED TensorRT.trtexec [TensorRT v8400] # trtexec --loadEngine=mnist16.trt --batch=16
"""


def test_public_8_4_implicit_batch_16(tmp_path: Path) -> None:
    path = excerpt(META_TEGRA_952, tmp_path, "mnist16.log")
    facts = LogFactsFromTrtexecLog(path.read_text())
    assert facts.tensorrt_version == "8.4.0" and facts.inference_batch == 16
    code, results = ingest(tmp_path, path)
    (row,) = measurement(results)
    assert code == 0 and row["batch"] == 16
    assert row["throughput_samples_per_s"] == 41087.7 and row["throughput_qps"] == pytest.approx(41087.7 / 16)
    assert (row["latency_min_ms"], row["latency_max_ms"], row["latency_mean_ms"], row["latency_median_ms"],
            row["latency_p99_ms"]) == (0.387207, 0.447357, 0.402238, 0.401947, 0.420288)
    assert (row["enqueue_mean_ms"], row["enqueue_median_ms"]) == (0.090497, 0.0871582)
    assert (row["h2d_mean_ms"], row["h2d_median_ms"]) == (0.0104126, 0.00952148)
    assert (row["compute_mean_ms"], row["compute_median_ms"], row["compute_p99_ms"]) == (0.388221, 0.388443, 0.393188)
    assert (row["d2h_mean_ms"], row["d2h_median_ms"]) == (0.00360451, 0.00366211)
    assert row["host_walltime_ms"] == pytest.approx(3001.19) and row["queries"] is None  # no trace line in it
    assert facts.gpu_compute_total_s == 2.99202


# NVIDIA/TensorRT issue 2054 (description): a TensorRT 7.x trtexec summary of an explicit-batch engine.
TRT_2054 = """
[06/12/2022-22:34:00] [I] Host Latency
[06/12/2022-22:34:00] [I] min: 1.64058 ms (end to end 1.66368 ms)
[06/12/2022-22:34:00] [I] max: 6.2915 ms (end to end 7.65552 ms)
[06/12/2022-22:34:00] [I] mean: 1.66069 ms (end to end 3.00909 ms)
[06/12/2022-22:34:00] [I] median: 1.65601 ms (end to end 3.01636 ms)
[06/12/2022-22:34:00] [I] percentile: 1.67065 ms at 99% (end to end 3.03931 ms at 99%)
[06/12/2022-22:34:00] [I] throughput: 0 qps
[06/12/2022-22:34:00] [I] walltime: 3.00461 s
"""


def test_public_7x_summary_with_its_zero_throughput(tmp_path: Path) -> None:
    facts = LogFactsFromTrtexecLog(excerpt(TRT_2054, tmp_path, "a.log").read_text())
    assert facts.layout_major == 7 and facts.summary["latency"] == {
        "min": 1.64058, "max": 6.2915, "mean": 1.66069, "median": 1.65601, "p99": 1.67065}
    assert facts.summary["end_to_end"] == {"min": 1.66368, "max": 7.65552, "mean": 3.00909, "median": 3.01636,
                                           "p99": 3.03931}
    assert summary_definition(facts)["zeros"]
    row = MeasurementFromSummary(facts, None)
    assert row["throughput_qps"] is None and row["throughput_samples_per_s"] is None
    assert row["host_walltime_ms"] == pytest.approx(3004.61)


# NVIDIA/TensorRT issue 1162 (description): TensorRT 7.x, an ONNX engine with dynamic shapes.
TRT_1162 = """
[03/31/2021-10:02:16] [I] Warmup completed 0 queries over 200 ms
[03/31/2021-10:02:16] [I] Timing trace has 0 queries over 3.06459 s
[03/31/2021-10:02:16] [I] Trace averages of 10 runs:
[03/31/2021-10:02:16] [I] Average on 10 runs - GPU latency: 23.6466 ms - Host latency: 28.7329 ms (end to end 44.1367 ms, enqueue 0.342834 ms)
"""


def test_public_7x_zero_query_count_is_not_a_count(tmp_path: Path) -> None:
    path = excerpt(TRT_1162, tmp_path, "b.log")
    assert detect_kind(path.read_text()) == "log"
    facts = LogFactsFromTrtexecLog(path.read_text())
    assert (facts.queries_printed, facts.trace_walltime_s) == (0, 3.06459)
    facts.layout_major = 7  # what the rest of that log's summary says (its "Host Latency" block)
    assert MeasurementFromSummary(facts, None)["queries"] is None


# NVIDIA/TensorRT issue 3842 (comment, 2024-05-08): the --dumpProfile table in the 8.6.1-on layout.
TRT_3842 = """
[05/08/2024-14:05:14] [I] === Profile (2094 iterations ) ===
[05/08/2024-14:05:14] [I]    Time(ms)     Avg.(ms)   Median(ms)   Time(%)   Layer
[05/08/2024-14:05:14] [I]       16.15       0.0077       0.0075       0.5   Reformatting CopyNode for Input Tensor 0 to node_of_gpu_0/conv1_1 + node_of_gpu_0/res_conv1_bn_1 + node_of_gpu_0/res_conv1_bn_2
[05/08/2024-14:05:14] [I]       47.82       0.0228       0.0225       1.6   node_of_gpu_0/conv1_1 + node_of_gpu_0/res_conv1_bn_1 + node_of_gpu_0/res_conv1_bn_2
[05/08/2024-14:05:14] [I]       14.02       0.0067       0.0069       0.5   node_of_gpu_0/pool1_1
"""


def test_public_name_last_profile(tmp_path: Path) -> None:
    path = excerpt(TRT_3842, tmp_path, "c.log")
    facts = LogFactsFromTrtexecLog(path.read_text())
    assert facts.profile.count == 2094
    assert [(r.total_ms, r.average_ms, r.median_ms, r.percentage) for r in facts.profile.rows] == [
        (16.15, 0.0077, 0.0075, 0.5), (47.82, 0.0228, 0.0225, 1.6), (14.02, 0.0067, 0.0069, 0.5)]
    assert facts.profile.rows[2].name == "node_of_gpu_0/pool1_1"
    assert facts.profile.rows[1].name == "node_of_gpu_0/conv1_1 + node_of_gpu_0/res_conv1_bn_1 + node_of_gpu_0/res_conv1_bn_2"
    code, results = ingest(tmp_path, path)
    assert code == 0
    assert Warehouse(results).connect().execute("SELECT count(*), sum(calls) FROM layers").fetchone() == (3, 3 * 2094)


# NVIDIA/TensorRT issue 3747 (description): device information of trtexec 8.6.3 on an RTX 2080.
TRT_3747 = """
[03/28/2024-07:10:12] [I] === Device Information ===
[03/28/2024-07:10:12] [I] Selected Device: NVIDIA GeForce RTX 2080
[03/28/2024-07:10:12] [I] Compute Capability: 7.5
[03/28/2024-07:10:12] [I] SMs: 46
[03/28/2024-07:10:12] [I] Device Global Memory: 7974 MiB
[03/28/2024-07:10:12] [I] Shared Memory per SM: 64 KiB
[03/28/2024-07:10:12] [I] Memory Bus Width: 256 bits (ECC disabled)
[03/28/2024-07:10:12] [I] Application Compute Clock Rate: 1.71 GHz
[03/28/2024-07:10:12] [I] Application Memory Clock Rate: 7 GHz
[03/28/2024-07:10:12] [I]
[03/28/2024-07:10:12] [I] TensorRT version: 8.6.3
"""


def test_public_8_6_device(tmp_path: Path) -> None:
    facts = LogFactsFromTrtexecLog(excerpt(TRT_3747, tmp_path, "d.log").read_text())
    assert facts.tensorrt_version == "8.6.3"
    assert facts.device == {"name": "NVIDIA GeForce RTX 2080", "compute_capability": "7.5", "sm_count": 46,
                            "memory_bytes": 7974 * 2**20, "memory_bus_width_bits": 256, "clock_graphics_mhz": 1710,
                            "clock_memory_mhz": 7000}


def test_pre_8_6_clock_names() -> None:
    """7.2 to 8.5 print "Compute Clock Rate" and "Memory Clock Rate" (sampleDevice.h)."""
    facts = LogFactsFromTrtexecLog("[I] === Device Information ===\n[I] Selected Device: Tesla T4\n"
                     "[I] Compute Clock Rate: 1.59 GHz\n[I] Memory Clock Rate: 5.001 GHz\n")
    assert (facts.device["clock_graphics_mhz"], facts.device["clock_memory_mhz"]) == (1590, 5001)


# collabora/WhisperLive issue 369 (description): a TensorRT 10.x build through TensorRT-LLM's Python
# logger, whose prefix puts [TRT] before the severity.
WHISPERLIVE_369 = """
[05/03/2025-10:30:43] [TRT] [I] Total Activation Memory: 42924544 bytes
[05/03/2025-10:30:43] [TRT] [I] Total Weights Memory: 157136256 bytes
[05/03/2025-10:30:43] [TRT] [I] Engine generation completed in 3.00621 seconds.
[05/03/2025-10:30:43] [TRT] [I] [MemUsageStats] Peak memory usage of TRT CPU/GPU memory allocators: CPU 0 MiB, GPU 150 MiB
"""

# NVIDIA/TensorRT issue 4136 (description, 2024-09-19): an 8.x build's totals, without " bytes".
TRT_4136 = """
[09/19/2024-22:15:34] [I] [TRT] Total Host Persistent Memory: 170400
[09/19/2024-22:15:34] [I] [TRT] Total Device Persistent Memory: 125895680
[09/19/2024-22:15:34] [I] [TRT] Total Scratch Memory: 59641344
[09/19/2024-22:15:34] [I] [TRT] [MemUsageStats] Peak memory usage of TRT CPU/GPU memory allocators: CPU 116 MiB, GPU 4 MiB
"""


def test_public_build_totals(tmp_path: Path) -> None:
    facts = LogFactsFromTrtexecLog(excerpt(WHISPERLIVE_369, tmp_path, "e.log").read_text())
    assert (facts.build_s, facts.builder_peak_host_bytes, facts.builder_peak_device_bytes) == (3.00621, 0, 150 * 2**20)
    facts = LogFactsFromTrtexecLog(excerpt(TRT_4136, tmp_path, "f.log").read_text())
    assert (facts.host_persistent_bytes, facts.device_persistent_bytes, facts.scratch_bytes) == (
        170400, 125895680, 59641344)
    assert (facts.builder_peak_host_bytes, facts.builder_peak_device_bytes) == (116 * 2**20, 4 * 2**20)


def test_the_timing_definition_of_a_10x_log() -> None:
    facts = LogFactsFromTrtexecLog((DOCS / "trt10_multipass_prefixed.log").read_text())
    assert TimingFromLog(facts)["latency_includes_transfers"] is True
