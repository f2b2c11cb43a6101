"""farm.trt_output's public readers exist under their `<Target>From<Source>` names, each reads a
fixture, and the package imports nothing above its layer."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import farm.trt_output as trt_output
from tests.ingest.test_trt_fixtures import SEEDS

DOCS = Path(__file__).resolve().parent / "written_from_docs"
PACKAGE = Path(trt_output.__file__).resolve().parent
ALLOWED = ("farm.trt_output", "farm.records", "farm.errors", "farm.files", "farm.layers.memory",
           "farm.layers.coverage", "farm.measure")
# a three-query --exportTimes trace, as trtexec 10.x writes one (times in ms)
TIMES = json.dumps([{"startEnqMs": q, "endEnqMs": q + 0.1, "startH2dMs": q, "endH2dMs": q + 0.2,
                     "startComputeMs": q + 0.2, "endComputeMs": q + 1.2, "startD2hMs": q + 1.2, "endD2hMs": q + 1.5,
                     "h2dMs": 0.2, "computeMs": 1.0, "d2hMs": 0.3, "latencyMs": 1.5} for q in (0.0, 2.0, 4.0)])


def test_every_public_name_exists() -> None:
    assert all(hasattr(trt_output, name) for name in trt_output.__all__)


def test_the_log_readers_read_the_fixtures() -> None:
    summary = trt_output.LogFactsFromTrtexecLog((SEEDS / "mnist_trt80.trtexec_perf_summary.log").read_text())
    assert summary.throughput_qps is not None and summary.summary["latency"]
    row = trt_output.MeasurementFromSummary(summary, 1)
    assert row["latency_median_ms"] == summary.summary["latency"]["median"]
    runs = trt_output.LogRunsFromTrtexecLog((DOCS / "trt7_explicit_two_runs.log").read_text().splitlines())
    assert len(runs) == 2
    prefixed = trt_output.LogFactsFromTrtexecLog((DOCS / "trt10_multipass_prefixed.log").read_text())
    device = trt_output.DeviceRowFromLog(prefixed)
    assert device["name"] == "NVIDIA H100 PCIe" and device["device_id"].startswith("gpu-GPU-")
    assert trt_output.DeviceRowFromLog(trt_output.LogFacts()) is None
    assert trt_output.TimingFromLog(prefixed)["latency_includes_transfers"] is True
    build = trt_output.LogFactsFromTrtexecLog((SEEDS / "fpn_int8.build_verbose.log").read_text())
    stats = trt_output.BuildStatsFromLog(build, artifact_bytes=10)
    assert stats.artifact_bytes == 10 and stats.layers_before_fusion == build.layers_after_parsing


def test_the_layer_readers_read_the_fixtures() -> None:
    text = (SEEDS / "centernet_int8.layer_info.log").read_text()
    layers = trt_output.LayersFromLogText(text)
    first_line = next(line for line in text.splitlines() if trt_output.LayerFromLogLine(line))
    assert layers and trt_output.LayerFromLogLine(first_line).name == layers[0].name
    profile = trt_output.ProfileFromProfileJson((SEEDS / "centernet_int8.profile.json").read_text())
    joined = trt_output.LayerRecordsFromEngineLayers(layers, profile, {})
    assert len(joined.records) >= len(layers) and any(r.time_avg_ms is not None for r in joined.records)
    inspector = (DOCS / "trt11_inspector.layers.json").read_text()
    info = trt_output.EngineInfoFromInspectorJson(inspector)
    names = [layer.name for layer in info.layers]
    assert [layer.name for layer in trt_output.LayersFromInspectorJson(inspector)] == names
    assert info.io_tensors and info.layers[0].weight_bytes == 216 * 2  # 216 Half weights
    document = json.loads(inspector)
    assert [layer.name for layer in trt_output.LayersFromInspector(document)] == names


def test_the_times_readers_read_a_trace() -> None:
    times = trt_output.TimesFromTimesJson(TIMES)
    samples = trt_output.SamplesFromTimes(times)
    row = trt_output.MeasurementFromTimes(times, 4)
    assert list(samples.latency_ms) == [1.5] * 3 and samples.walltime_ms == 5.5
    assert row["queries"] == 3 and row["throughput_samples_per_s"] == row["throughput_qps"] * 4
    assert trt_output.TimingFromTrtexecCommand(["--noDataTransfers"], 10)["latency_includes_transfers"] is False


def test_the_package_imports_nothing_above_its_layer() -> None:
    for module in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                if name.split(".")[0] == "farm":
                    assert name.startswith(ALLOWED), f"{module.name} imports {name}"
