"""What an ingested measurement's latency includes, and the 11.x inspector JSON ("I/O Tensors").

The 11.x samples in written_from_docs/ were written by hand from the documented formats (see its
README.md), not recorded; the recorded real output in tests/fixtures/trt_seeds is used as it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from farm.cli import main
from farm.ingest import read_file
from farm.warehouse import Warehouse
from tests.ingest.test_trt_fixtures import SEEDS

DOCS = Path(__file__).resolve().parent / "written_from_docs"
TIMING = ("latency_includes_transfers, timing_cuda_graph, timing_spin_wait, timing_streams, "
          "timing_engine_version")


def ingest(tmp_path: Path, *files: Path, engine: str | None = None):
    results = tmp_path / "results"
    assert main(["ingest", *map(str, files), "--results", str(results),
                 *(["--engine", engine] if engine else [])]) == 0
    return Warehouse(results).connect()


def test_the_11x_inspector_sample_ingests(tmp_path: Path) -> None:
    read = read_file(DOCS / "trt11_inspector.layers.json")
    assert read.usable and read.found == "engine inspector JSON: 2 layers, 2 I/O tensors"
    assert [(t.name, t.is_input, t.dtype, t.dims) for t in read.io_tensors] == [
        ("input", True, "Half", [2, 3, 32, 32]), ("output", False, "Half", [2, 8, 1, 1])]
    con = ingest(tmp_path, DOCS / "trt11_inspector.layers.json")
    rows = con.execute("SELECT name, input_bytes, weight_bytes, output_bytes, input_dtypes FROM layers "
                       "ORDER BY layer_index").fetchall()
    assert rows == [("conv1 + relu1", 2 * 3 * 32 * 32 * 2, 216 * 2, 2 * 8 * 32 * 32 * 2, 'Half'),
                    ("pool", 2 * 8 * 32 * 32 * 2, 0, 2 * 8 * 2, 'Half')]
    assert con.execute("SELECT precision, batch FROM cells").fetchone() == ("fp16", 2)


def test_11x_io_tensors_give_the_batch_when_layers_are_names_only(tmp_path: Path) -> None:
    con = ingest(tmp_path, DOCS / "trt11_inspector_names_only.layers.json")
    assert con.execute("SELECT batch FROM cells").fetchone() == (4,)
    assert con.execute("SELECT count(*) FROM layers").fetchone() == (2,)


def test_10x_bindings_still_read() -> None:
    from farm.trt_output import EngineInfoFromInspectorJson

    tensors = EngineInfoFromInspectorJson(json.dumps({"Layers": ["a"], "Bindings": ["input", "output"]})).io_tensors
    assert [t.name for t in tensors] == ["input", "output"] and all(t.dims is None for t in tensors)


@pytest.mark.parametrize("io, message", [
    ('"I/O Tensors": {"input": 1}', '"I/O Tensors" is {"input": 1}, not a list'),
    ('"I/O Tensors": [{"IOMode": "Input"}]', '"I/O Tensors" entry 1 is {"IOMode": "Input"}, neither a name'),
    ('"I/O Tensors": [{"Name": "x", "Dimensions": ["a"]}]', "has `Dimensions` [\"a\"], not a list of sizes"),
])
def test_unreadable_io_tensors_are_named(tmp_path: Path, io: str, message: str) -> None:
    path = tmp_path / "bad.layers.json"
    path.write_text('{"Layers": ["a"], ' + io + "}")
    read = read_file(path)
    assert read.error and message in read.problem


def test_ingested_measurements_record_the_timing_the_log_states(tmp_path: Path) -> None:
    """The log's "Inference Options" (11.x defaults: copies off, CUDA graph and spin wait on) go with
    the per-query times (synthetic, for this test) into the measurement."""
    times, t = [], 0.0
    for i in range(50):
        compute = 1.0 + 0.01 * (i % 3)
        times.append({"startEnqMs": t, "endEnqMs": t + 0.01, "startH2dMs": t, "endH2dMs": t, "startComputeMs": t,
                      "endComputeMs": t + compute, "startD2hMs": t + compute, "endD2hMs": t + compute,
                      "h2dMs": 0.0, "computeMs": compute, "d2hMs": 0.0, "latencyMs": compute})
        t += compute + 0.05
    (tmp_path / "engine.times.json").write_text(json.dumps(times))
    con = ingest(tmp_path, DOCS / "trt11_inference_options.log", tmp_path / "engine.times.json",
                 DOCS / "trt11_inspector.layers.json", engine="engine")
    assert con.execute(f"SELECT {TIMING} FROM measurements").fetchone() == (False, True, True, 1, "TensorRT 11.1.0")
    # no copies were made: H2D and D2H are absent, not the zeros --exportTimes writes for them
    assert con.execute("SELECT h2d_mean_ms, h2d_median_ms, d2h_mean_ms, d2h_median_ms, compute_mean_ms > 0 "
                       "FROM measurements").fetchone() == (None, None, None, None, True)
    assert con.execute("SELECT count(*), count(h2d_ms), count(d2h_ms) FROM samples").fetchone() == (50, 0, 0)


def test_recorded_logs_give_what_they_say_and_null_for_the_rest(tmp_path: Path) -> None:
    con = ingest(tmp_path, SEEDS / "resnet50_trt86.build_verbose_excerpt.log")
    # the excerpt prints "Inference Streams: 1" of its inference options, and no TensorRT version
    assert con.execute(f"SELECT {TIMING} FROM measurements").fetchone() == (None, None, None, 1, None)
    con = ingest(tmp_path / "mnist", SEEDS / "mnist_trt80.trtexec_perf_summary.log")
    # a version and a (cut) command line, but 8.x defaults are not documented here: unknown
    assert con.execute(f"SELECT {TIMING} FROM measurements").fetchone() == (None, None, None, None, "TensorRT 8.0.3")


def test_a_10x_command_line_gives_the_definition_where_options_are_not_printed() -> None:
    from farm.trt_output import LogFactsFromTrtexecLog, TimingFromLog

    facts = LogFactsFromTrtexecLog("&&&& RUNNING TensorRT.trtexec [TensorRT v101300] # trtexec --loadEngine=e.plan "
                                   "--useCudaGraph")
    assert TimingFromLog(facts) == {"latency_includes_transfers": True, "timing_cuda_graph": True,
                                    "timing_spin_wait": False, "timing_streams": 1,
                                    "timing_engine_version": "TensorRT 10.13.0"}
