"""`farm ingest` into a warehouse: the recorded engines, --exportTimes, inspector JSON (10.x, 11.x)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from farm.cli import main
from farm.measure import latency_stats
from farm.warehouse import Warehouse
from tests.ingest.test_trt_fixtures import SEEDS


@pytest.fixture
def warehouse(tmp_path: Path):
    results = tmp_path / "results"
    S = SEEDS
    assert main(["ingest", str(S / "fpn_int8.profile.json"), str(S / "fpn_int8.build_verbose.log"),
                 "--results", str(results)]) == 0
    assert main(["ingest", str(S / "centernet_int8.layer_info.log"), str(S / "centernet_int8.profile.json"),
                 "--results", str(results)]) == 0
    assert main(["ingest", str(S / "resnet50_trt86.build_verbose_excerpt.log"),
                 str(S / "resnet50_trt86.dump_profile_table.log"), "--engine", "resnet50",
                 "--results", str(results)]) == 0
    assert main(["ingest", str(S / "mnist_trt80.trtexec_perf_summary.log"), "--results", str(results)]) == 0
    return Warehouse(results).connect()


def one(con, sql: str):
    return con.execute(sql).fetchone()


def test_fpn_layers_in_the_warehouse(warehouse) -> None:
    con = warehouse
    row = one(con, """SELECT input_bytes, weight_bytes, output_bytes, total_bytes, time_avg_ms, calls
                      FROM layers JOIN cells USING (cell_id) WHERE model = 'fpn_int8' AND name = 'Conv_0 + PWN(Clip_3)'""")
    assert row == (1_179_648, 864, 3_145_728, 4_326_240, 0.0662771, 625)
    row = one(con, """SELECT total_bytes, time_avg_ms, time_share_percent FROM layers JOIN cells USING (cell_id)
                      WHERE model = 'fpn_int8' AND name = 'PWN(Add_133)'""")
    assert row == (589_824, 0.00943995, 0.193796)  # its time is the profile's `Add_133` row
    # The cut log leaves 65 profile rows without layer information: kept with their times, sizes
    # unknown. Of its 48 layers, only those whose every size is known have a total: convolutions
    # other than Conv_0 lost their kernel shapes to the cut, so their weights (and totals) are unknown.
    assert one(con, """SELECT count(*), count(input_bytes), count(total_bytes), round(sum(time_avg_ms), 6)
                       FROM layers JOIN cells USING (cell_id) WHERE model = 'fpn_int8'""") == (113, 48, 3, 4.871083)
    assert one(con, "SELECT precision, batch, backend FROM cells WHERE model = 'fpn_int8'") == ("int8", 1, "tensorrt")


def test_centernet_in_the_warehouse(warehouse) -> None:
    con = warehouse
    assert one(con, """SELECT count(*), round(sum(time_avg_ms), 6), count(input_bytes) FROM layers
                       JOIN cells USING (cell_id) WHERE model = 'centernet_int8'""") == (54, 2.595678, 0)
    name, share = one(con, """SELECT name, time_share_percent FROM layers JOIN cells USING (cell_id)
                              WHERE model = 'centernet_int8' ORDER BY time_avg_ms DESC LIMIT 1""")
    assert name.endswith("ConvTranspose_595") and round(share, 2) == 15.28
    shapes = one(con, """SELECT input_shapes FROM layers JOIN cells USING (cell_id)
                         WHERE model = 'centernet_int8' AND layer_index = 0""")[0]
    assert shapes == "1x3x-17x-18"  # printed as TensorRT printed it; the bytes stay unknown


def test_resnet50_and_mnist_in_the_warehouse(warehouse) -> None:
    con = warehouse
    assert one(con, """SELECT build_s, layers_before_fusion, layers_after_fusion, layers_with_reformats,
                              engine_host_persistent_bytes, engine_device_persistent_bytes, engine_scratch_bytes,
                              builder_peak_memory_bytes
                       FROM builds JOIN cells USING (cell_id) WHERE model = 'resnet50'""") == (
        15.3167, 126, 57, 82, 331_696, 22_016, 4_608, 107 * 2**20)
    assert one(con, """SELECT throughput_qps, latency_p90_ms, latency_p95_ms, latency_p99_ms
                       FROM measurements JOIN cells USING (cell_id) WHERE model = 'resnet50'""") == (
        502.107, 1.9592, 1.98364, 2.34845)
    assert one(con, """SELECT d.name, d.compute_capability, d.sm_count, d.memory_bytes FROM cells c
                       JOIN devices d USING (device_id) WHERE c.model = 'resnet50'""") == (
        "NVIDIA GeForce RTX 3060 Laptop GPU", "8.6", 30, 6143 * 2**20)
    assert one(con, """SELECT throughput_qps, latency_mean_ms, latency_median_ms, latency_p99_ms, compute_mean_ms,
                              host_walltime_ms FROM measurements JOIN cells USING (cell_id)
                       WHERE model = 'mnist_trt80'""") == (6430.89, 0.160129, 0.159668, 0.165771, 0.15368, 3000.36)
    versions = json.loads(one(con, "SELECT versions FROM cells WHERE model = 'mnist_trt80'")[0])
    assert versions["tensorrt"] == "8.0.3"
    assert one(con, """SELECT host_persistent_bytes FROM layers JOIN cells USING (cell_id)
                       WHERE model = 'resnet50' AND name = 'Conv_0 + Relu_1'""") == (None,)  # not in the excerpt
    assert one(con, """SELECT host_persistent_bytes FROM layers JOIN cells USING (cell_id)
                       WHERE model = 'resnet50' AND name = 'Gemm_121'""") is None  # a memory line without a layer line
    assert one(con, "SELECT count(*) FROM samples") == (0,)  # summaries only: no raw samples invented


def test_export_times_gives_samples_and_farm_statistics(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    records, t = [], 100.0
    for _ in range(200):
        h2d, compute, d2h = 0.05, float(rng.uniform(1.0, 1.2)), 0.01
        records.append({"startEnqMs": t, "endEnqMs": t + 0.02, "startH2dMs": t, "endH2dMs": t + h2d,
                        "startComputeMs": t + h2d, "endComputeMs": t + h2d + compute,
                        "startD2hMs": t + h2d + compute, "endD2hMs": t + h2d + compute + d2h,
                        "h2dMs": h2d, "computeMs": compute, "d2hMs": d2h, "latencyMs": h2d + compute + d2h})
        t += h2d + compute + d2h + 0.1
    path = tmp_path / "engine.times.json"
    path.write_text(json.dumps(records))
    results = tmp_path / "results"
    assert main(["ingest", str(path), "--results", str(results)]) == 0
    con = Warehouse(results).connect()
    latency = np.asarray([r["latencyMs"] for r in records])
    expected = latency_stats(latency)
    row = one(con, "SELECT queries, latency_median_ms, latency_p99_ms, latency_cv_percent, throughput_qps FROM measurements")
    walltime_s = (records[-1]["endD2hMs"] - records[0]["startH2dMs"]) / 1e3
    assert row == pytest.approx((200, expected["latency_median_ms"], expected["latency_p99_ms"],
                                 expected["latency_cv_percent"], 200 / walltime_s))
    assert one(con, "SELECT count(*), round(avg(enqueue_ms), 6) FROM samples") == (200, 0.02)



def _times(latency: list[float]) -> list[dict]:
    records, t = [], 100.0
    for value in latency:
        records.append({"startH2dMs": t, "endD2hMs": t + value, "latencyMs": value, "computeMs": value})
        t += 2.0
    return records


@pytest.mark.parametrize(("files", "named"), [
    ({"e.log": lambda: (SEEDS / "mnist_trt80.trtexec_perf_summary.log").read_text().replace(
        "Throughput: 6430.89 qps", "Throughput: 1e308 qps")}, "throughput_qps = 1e+308"),
    ({"e.log": lambda: (SEEDS / "mnist_trt80.trtexec_perf_summary.log").read_text(),
      "e.profile.json": lambda: json.dumps([{"count": 10}, {"name": "conv", "timeMs": 1.0, "averageMs": 1e300,
                                                           "percentage": 100.0}])},
     "layer 'conv': time_avg_ms = 1e+300 ms"),
    ({"e.times.json": lambda: json.dumps(_times([1.0] * 50 + [1e308] + [1.0] * 50))}, "query 51: latency_ms = 1e+308"),
    ({"e.log": lambda: (SEEDS / "mnist_trt80.trtexec_perf_summary.log").read_text().replace(
        "median = 0.153564 ms", "median = -0.153564 ms")}, "compute_median_ms = -0.153564 ms"),
])
def test_figures_trtexec_cannot_have_measured_are_refused(tmp_path: Path, capsys, files: dict, named: str) -> None:
    """A file whose figures no run can have given (a query of 1e308 ms, a negative latency, 10^308
    queries a second) is refused in one line naming the figure: nothing is stored, shown or
    compared as trtexec's, and numpy's overflow warnings never reach the user."""
    import warnings

    paths = []
    for name, text in files.items():
        paths.append(tmp_path / name)
        paths[-1].write_text(text())
    results = tmp_path / "results"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow warning would fail the ingest here
        assert main(["ingest", *map(str, paths), "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert named in err and ("no time trtexec measured" in err or "no throughput" in err), err
    assert "nothing was written" in err and not list(results.glob("*/cells/*.parquet"))

@pytest.mark.parametrize("style", ["10.x", "11.x"])
def test_inspector_json(tmp_path: Path, style: str) -> None:
    def tensor(name, dims, fmt):
        if style == "10.x":
            return {"Name": name, "Dimensions": dims, "Format/Datatype": fmt}
        return {"Name": name, "Dimensions": dims, "Datatype": fmt.split()[-1], "Format": fmt}

    document = {"Layers": [
        {"Name": "conv1 + relu1", "LayerType": "CaskConvolution",
         "Inputs": [tensor("input", [2, 3, 32, 32], "Row major linear FP16")],
         "Outputs": [tensor("c1", [2, 8, 32, 32], "Row major linear FP16")],
         "Weights": {"Type": "Half", "Count": 216}, "TacticName": "sm90_xmma_fprop"},
        {"Name": "pool", "LayerType": "CudnnPooling", "Inputs": [tensor("c1", [-1, 8, 32, 32], "Row major linear FP16")],
         "Outputs": [tensor("out", [-1, 8, 1, 1], "Row major linear FP16")]},
    ], ("Bindings" if style == "10.x" else "I/O Tensors"): []}
    path = tmp_path / "engine.layers.json"
    path.write_text(json.dumps(document))
    results = tmp_path / "results"
    assert main(["ingest", str(path), "--results", str(results)]) == 0
    con = Warehouse(results).connect()
    rows = con.execute("SELECT name, input_bytes, weight_bytes, output_bytes, total_bytes, tactic FROM layers "
                       "ORDER BY layer_index").fetchall()
    assert rows[0] == ("conv1 + relu1", 2 * 3 * 32 * 32 * 2, 216 * 2, 2 * 8 * 32 * 32 * 2,
                       2 * 3 * 32 * 32 * 2 + 432 + 2 * 8 * 32 * 32 * 2, "sm90_xmma_fprop")
    assert rows[1][1:5] == (None, 0, None, None)  # -1: dynamic, unknown
    assert one(con, "SELECT precision FROM cells") == ("fp16",)


def test_a_profile_that_does_not_fit_the_log_is_said(tmp_path: Path, capsys) -> None:
    """A log with the profile of another engine (fpn's layers against mnist's compute time): the
    cell is written, as its files are real TensorRT output, and the ingest says the layers sum to
    far more than the log's compute time and what to do."""
    results = tmp_path / "results"
    assert main(["ingest", str(SEEDS / "mnist_trt80.trtexec_perf_summary.log"), str(SEEDS / "fpn_int8.profile.json"),
                 "--results", str(results)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    coverage = Warehouse(results).connect().execute("SELECT layer_coverage_percent FROM measurements").fetchone()[0]
    assert coverage > 500 and f"the profile's layers sum to {coverage:,.0f} % of the log's compute time" in out, out
    assert "ingest the files apart (--separate)" in out
