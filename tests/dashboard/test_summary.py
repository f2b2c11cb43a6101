"""The answer first (farm.dashboard.summary): on a warehouse whose answer is known, the fastest
configuration that passes accuracy per model and batch, the fastest that fails (faster, here), the
default baseline (fp32 on the first backend the sweep lists, eager) and a changed one; the same on
the Overview page (AppTest) and in the report; chart colours."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from farm.cli import main
from farm.dashboard import RESULTS_ENV
from farm.dashboard.data import Snapshot, series_labels
from farm.dashboard.summary import (
    FAMILIES,
    PRECISION_FAMILY,
    default_baseline,
    listed_backends,
    metric_text,
    series_colours,
    summary,
    summary_text,
)
from farm.measure import SAMPLE_INTERVAL_METHOD
from farm.warehouse import Warehouse

APP = str(Path(__file__).resolve().parents[2] / "farm" / "dashboard" / "app.py")
START = datetime(2026, 11, 1, tzinfo=UTC)
CONFIG = '''name = "known"
[[models]]
source = "m.onnx"
[axes]
precisions = ["fp32", "fp16", "bf16"]
batch_sizes = [1, 32]
backends = ["torch", "onnxruntime"]
[backends.torch]
mode = ["eager", "compile"]
'''
# (precision, batch, backend, mode, samples/s, verdict, worst metric, its value, n): batch 32's answer is fp16
# compile (800/s) over fp32 torch eager (320/s), 2.5x; bf16 compile fails and is faster (1000/s). onnxruntime,
# though first by name, is not the default baseline: the sweep lists torch first.
CELLS = [
    ("fp32", 32, "torch", "eager", 320.0, "pass", "top1_agreement", 1.0, 64),
    ("fp32", 32, "torch", "compile", 400.0, "pass", "top1_agreement", 1.0, 64),
    ("fp32", 32, "onnxruntime", None, 500.0, "pass", "top1_agreement", 1.0, 64),
    ("fp16", 32, "torch", "eager", 600.0, "pass", "cosine_similarity", 0.99995, 64),
    ("fp16", 32, "torch", "compile", 800.0, "pass", "cosine_similarity", 0.999994, 64),
    ("bf16", 32, "torch", "eager", 700.0, "fail", "top1_agreement", 0.9, 64),
    ("bf16", 32, "torch", "compile", 1000.0, "fail", "top1_agreement", 0.875, 64),
    ("fp32", 1, "torch", "eager", 100.0, "pass", "top1_agreement", 1.0, 16),
    ("fp32", 1, "torch", "compile", 120.0, "pass", "top1_agreement", 1.0, 16),
    ("fp16", 1, "torch", "compile", 150.0, "fail", "top1_agreement", 0.5, 16),
    ("bf16", 1, "torch", "compile", 90.0, "fail", "top1_agreement", 0.25, 16),
]
BEST_32 = "fp16 · torch mode=compile"
PEAK_BYTES = 154_140_672  # the best batch-32 cell's: 147.00 MiB


def write_known(root: Path) -> None:
    warehouse = Warehouse(root)
    with warehouse.writer_lock():
        warehouse.write_sweep_run({"run_id": "run0", "sweep_id": "known", "name": "known", "started_at": START,
                                   "finished_at": START, "config_text": CONFIG, "cells_planned": len(CELLS) + 1})
    device = {"device_id": "gpu0", "kind": "cuda", "name": "Test GPU", "host": "h"}
    for i, (precision, batch, backend, mode, rate, verdict, metric, value, n) in enumerate(CELLS):
        cell_id = f"{i:016x}"
        latency = 1000 * batch / rate  # one query at a time: ms per batch
        options = f'{{"mode": "{mode}"}}' if mode else "{}"
        best = (precision, batch, backend, mode) == ("fp16", 32, "torch", "compile")
        warehouse.write_cell("known", cell_id, {
            "cells": [{"cell_id": cell_id, "sweep_id": "known", "run_id": "run0", "model": "m", "precision": precision,
                       "batch": batch, "backend": backend, "options": options, "status": "ok", "device_id": "gpu0",
                       "started_at": START + timedelta(seconds=i), "finished_at": START + timedelta(seconds=i + 1)}],
            "measurements": [{"cell_id": cell_id, "throughput_qps": rate / batch, "throughput_samples_per_s": rate,
                              "latency_median_ms": latency, "latency_p99_ms": latency * 1.5,
                              "median_ci_low_ms": latency * 0.99, "median_ci_high_ms": latency * 1.01,
                              "median_ci_method": SAMPLE_INTERVAL_METHOD, "stable": True,
                              "peak_memory_bytes": PEAK_BYTES if best else 100 * 2**20 + i,
                              "energy_per_query_mj": 12.5 * batch if best else None,
                              "energy_per_sample_mj": 12.5 if best else None}],
            "accuracy": [{"cell_id": cell_id, "output_name": "logits", "n": n, "verdict": verdict,
                          "worst_metric": metric, "worst_value": value}],
            "devices": [device]})
    # a failed cell (no measurement) is never an answer
    warehouse.write_cell("known", "f" * 16, {"cells": [{
        "cell_id": "f" * 16, "sweep_id": "known", "run_id": "run0", "model": "m", "precision": "int8", "batch": 32,
        "backend": "torch", "options": '{"mode": "compile"}', "status": "failed", "reason": "no int8 kernels"}]})


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("summary") / "results"
    write_known(root)
    return root


@pytest.fixture(scope="module")
def frame(known: Path):
    snap = Snapshot(known)
    cells = snap.cell_frame.assign(series=series_labels(snap.cell_frame))
    return snap, cells


def test_default_baseline_is_fp32_on_the_first_listed_backend_in_eager_mode(frame) -> None:
    snap, cells = frame
    assert listed_backends(snap, ["known"]) == ["torch", "onnxruntime"]
    assert default_baseline(cells, ["torch", "onnxruntime"]) == "fp32 · torch mode=eager"
    assert default_baseline(cells, ["onnxruntime", "torch"]) == "fp32 · onnxruntime"
    no_fp32 = cells[cells.precision != "fp32"]
    assert default_baseline(no_fp32, ["torch"]) == "fp16 · torch mode=eager"  # the nearest there is


def test_summary_answers_per_model_and_batch(frame) -> None:
    snap, cells = frame
    table = summary(snap, cells, "fp32 · torch mode=eager").set_index("batch")
    assert list(table.index) == [1, 32]
    b32 = table.loc[32]
    assert b32.series == BEST_32 and b32.throughput_samples_per_s == 800.0
    assert b32.speedup == pytest.approx(800 / 320) and b32.vs_baseline == "faster"
    assert b32.latency_p99_ms == pytest.approx(1000 * 32 / 800 * 1.5)
    assert b32.verdict == "pass" and b32.n == 64 and b32.accuracy == "pass: cosine 0.9999940"
    # energy per inference: per sample (a query of batch 32 is 32 inferences), not per query
    assert b32.peak_memory_bytes == PEAK_BYTES and b32.energy_per_sample_mj == 12.5
    # the fastest that fails accuracy, beside it: faster than the answer, so marked
    assert b32.fail_series == "bf16 · torch mode=compile" and b32.fail_throughput_samples_per_s == 1000.0
    assert b32.fail_accuracy == "fail: top-1 agreement 87.5 %" and b32.fail_faster
    assert b32.fail_speedup == pytest.approx(1000 / 320)
    b1 = table.loc[1]
    assert b1.series == "fp32 · torch mode=compile" and b1.speedup == pytest.approx(1.2) and b1.n == 16
    assert b1.fail_series == "fp16 · torch mode=compile" and b1.fail_faster


def test_a_changed_baseline_changes_every_speedup(frame) -> None:
    snap, cells = frame
    table = summary(snap, cells, "fp32 · onnxruntime").set_index("batch")
    assert table.loc[32, "speedup"] == pytest.approx(800 / 500)
    assert table.loc[32, "fail_speedup"] == pytest.approx(1000 / 500)
    assert table.loc[32, "series"] == BEST_32  # the answer itself does not depend on the baseline
    assert table.loc[1, "speedup"] != table.loc[1, "speedup"]  # no onnxruntime cell at batch 1: no speedup (NaN)


def test_a_group_never_checked_falls_back_to_its_fastest_unchecked_cell(frame) -> None:
    snap, cells = frame
    unchecked = cells.assign(verdict=None)
    table = summary(snap, unchecked, "fp32 · torch mode=eager").set_index("batch")
    assert table.loc[32, "series"] == "bf16 · torch mode=compile" and table.loc[32, "verdict"] is None
    assert table.loc[32, "fail_series"] != table.loc[32, "fail_series"]  # none fails: NaN
    shown = summary_text(table.reset_index())
    assert shown.accuracy.tolist() == ["not checked", "not checked"]


def test_summary_text_is_in_human_units(frame) -> None:
    snap, cells = frame
    shown = summary_text(summary(snap, cells, "fp32 · torch mode=eager")).set_index("batch")
    row = shown.loc[32]
    assert row["fastest that passes accuracy"] == BEST_32
    assert row["samples/s"] == "800" and row["p99 ms"] == "60"
    assert row["speedup"] == "2.50× (faster)"
    assert row["accuracy"] == "cosine 0.9999940, n = 64"
    assert row["peak memory"] == "147.00 MiB" and "154140672" not in shown.to_string()
    assert row["mJ / inference"] == "12.5"
    assert row["✗ fastest that fails accuracy"] == "bf16 · torch mode=compile"
    assert row["its samples/s"] == "1000 ⚠ faster" and row["its accuracy"] == "top-1 agreement 87.5 %, n = 64"


def test_metric_text() -> None:
    assert metric_text("top1_agreement", 0.992) == "top-1 agreement 99.2 %"
    assert metric_text("top5_agreement", 1.0) == "top-5 agreement 100.0 %"
    assert metric_text("cosine_similarity", 0.9999999562) == "cosine 0.999999956"
    assert metric_text("cosine_similarity", 0.95) == "cosine 0.9500"
    assert metric_text("max_abs_error", 0.0123456) == "max abs error 0.01235"
    assert metric_text(None, 1.0) == ""
    assert metric_text("shape", None) == ""  # a failing metric with no figure
    reason = "reference ~0 on these inputs (99.1 % of elements 0, largest 0.053)"
    assert metric_text(reason, None) == reason  # an unjudged output says why


def test_twelve_series_get_twelve_colours_by_precision(frame) -> None:
    import pandas as pd

    series = pd.DataFrame([{"series": f"{p} · torch mode={m}", "precision": p}
                           for p in ("fp32", "tf32", "fp16", "bf16") for m in ("eager", "compile", "cudagraphs")])
    colours = series_colours(series)
    assert len(colours) == 12 and len(set(colours.values())) == 12
    blues = {colours[f"fp32 · torch mode={m}"] for m in ("eager", "compile", "cudagraphs")}
    assert blues <= set(FAMILIES["blue"])  # fp32's hue family


def open_overview(monkeypatch, root: Path) -> AppTest:
    monkeypatch.setenv(RESULTS_ENV, str(root))
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_overview_answers_first(monkeypatch, known: Path) -> None:
    at = open_overview(monkeypatch, known)
    assert at.selectbox(key="ov-baseline").value == "fp32 · torch mode=eager"
    table = at.table[0].value
    row = table[table.batch == 32].iloc[0]
    assert row["fastest that passes accuracy"] == BEST_32 and row["speedup"] == "2.50× (faster)"
    assert row["accuracy"] == "cosine 0.9999940, n = 64" and row["peak memory"] == "147.00 MiB"
    assert row["✗ fastest that fails accuracy"] == "bf16 · torch mode=compile"

    at.selectbox(key="ov-baseline").set_value("fp32 · onnxruntime").run()
    table = at.table[0].value
    assert table[table.batch == 32].iloc[0]["speedup"] == "1.60× (faster)"

    at.multiselect(key="ov-batches").set_value([1]).run()
    table = at.table[0].value
    assert table.batch.tolist() == [1]
    assert table.iloc[0]["fastest that passes accuracy"] == "fp32 · torch mode=compile"


def test_compare_defaults_to_the_same_baseline_and_sorts_its_table(monkeypatch, known: Path) -> None:
    monkeypatch.setenv(RESULTS_ENV, str(known))
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.switch_page("views/compare.py").run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.selectbox(key="cmp-baseline").value == "fp32 · torch mode=eager"
    table = at.dataframe[0].value
    assert table.batch.tolist() == [1] * 4 + [32] * 7  # model, batch, then throughput, highest first
    assert table.throughput_samples_per_s.tolist()[4:] == [1000, 800, 700, 600, 500, 400, 320]
    assert table.peak_memory_mib.max() == pytest.approx(PEAK_BYTES / 2**20)

    at.multiselect(key="cmp-batches").set_value([32]).run()
    assert set(at.dataframe[0].value.batch) == {32}
    throughput = charts(at)[0]  # throughput against batch: log y by default, linear when switched off
    assert throughput["layer"][0]["encoding"]["y"]["scale"] == {"type": "log"}
    colour = throughput["layer"][0]["encoding"]["color"]
    # every series of the page has its own legend entry and colour, never cut short
    assert colour["scale"]["domain"] == sorted(set(at.dataframe[0].value.series))
    assert len(set(colour["scale"]["range"])) == len(colour["scale"]["domain"]) == 7
    assert colour["legend"]["labelLimit"] == 0 and colour["legend"]["symbolLimit"] == 0
    at.toggle(key="cmp-logy").set_value(False).run()
    assert charts(at)[0]["layer"][0]["encoding"]["y"]["scale"] == {"zero": False}
    pareto = charts(at)[2]["layer"]
    assert pareto[2]["mark"]["type"] == "text" and pareto[2]["encoding"]["text"]["field"] == "batch_label"


def charts(at: AppTest) -> list[dict]:
    import json

    return [json.loads(chart.proto.spec) for chart in at.get("vega_lite_chart")]


def test_report_header_answers_first(known: Path, tmp_path: Path) -> None:
    output = tmp_path / "report.html"
    assert main(["report", "known", "-o", str(output), "--results", str(known)]) == 0
    text = output.read_text()
    head = text[text.index("Fastest configuration per model and batch"):text.index("<h2>m</h2>")]
    assert BEST_32 in head and "2.50× (faster)" in head and "147.00 MiB" in head and "n = 64" in head
    assert "✗ bf16 · torch mode=compile" in head and "⚠ faster" in head
    assert "<b>fp32 · torch mode=eager</b>" in head
    assert "154140672" not in text


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "results"


@pytest.mark.skipif(not (EXAMPLES / "gpu-resnet50").is_dir(), reason="no example warehouse in this checkout")
def test_the_reports_12_series_have_12_colours(tmp_path: Path) -> None:
    """The example's 4 precisions x 3 PyTorch modes: every series its own colour (a matplotlib
    cycle of 10 gave two pairs the same one), fp32's in blues."""
    output = tmp_path / "report.html"
    assert main(["report", "gpu-resnet50", "-o", str(output), "--results", str(EXAMPLES)]) == 0
    text = output.read_text()
    frame = Snapshot(EXAMPLES).cell_frame
    frame = frame[frame.sweep_id == "gpu-resnet50"]
    colours = series_colours(frame.assign(series=series_labels(frame)))
    assert len(colours) == 12 and len(set(colours.values())) == 12
    chart = text[text.index("<svg"):text.index("</svg>")]  # throughput against batch size
    assert all(f"stroke: {colour}" in chart for colour in colours.values())
    assert "fp32 · torch mode=eager</b>" in text  # the default baseline


def test_the_examples_default_baseline_is_the_documented_one_despite_a_narrower_last_run() -> None:
    """examples/results' gpu-engines ran twice with torch and onnxruntime, then once with onnxruntime
    alone: the default baseline stays fp32 on torch in eager mode (docs/dashboard.md), not the last
    file's first backend."""
    examples = Path(__file__).resolve().parents[2] / "examples" / "results"
    if not (examples / "gpu-engines").is_dir():
        pytest.skip("this checkout has no examples/results/gpu-engines")
    snap = Snapshot(examples)
    cells = snap.cell_frame[snap.cell_frame.sweep_id == "gpu-engines"]
    cells = cells.assign(series=series_labels(cells))
    assert listed_backends(snap, ["gpu-engines"]) == ["torch", "onnxruntime"]
    assert default_baseline(cells, listed_backends(snap, ["gpu-engines"])) == "fp32 · torch mode=eager"


def test_eighteen_series_get_eighteen_colours() -> None:
    """The GPU example's Compare page: 4 precisions x 5 engines less bf16 on ONNX Runtime, 18 series.
    A precision's fifth series took its first shade again (fp16 eager and fp16 ONNX Runtime were one
    green), then a shade of another hue (an fp32 series in int8's red); now every series has its own
    colour in its precision's hue."""
    import pandas as pd

    engines = ["onnxruntime cuda_graph=false", "onnxruntime cuda_graph=true", "torch mode=compile",
               "torch mode=cudagraphs", "torch mode=eager"]
    series = pd.DataFrame([{"series": f"{p} · {e}", "precision": p} for p in ("fp32", "tf32", "fp16", "bf16")
                           for e in engines if not (p == "bf16" and e.startswith("onnxruntime"))])
    colours = series_colours(series)
    assert len(colours) == 18 and len(set(colours.values())) == 18
    for precision in ("fp32", "tf32", "fp16", "bf16"):
        hue = set(FAMILIES[PRECISION_FAMILY[precision]])
        assert all(colour in hue for name, colour in colours.items() if name.startswith(precision + " ")), colours


def test_series_past_a_hue_never_take_another_precisions_hue() -> None:
    """Eight fp32 series beside fp16 and int8: the two past blue's six shades are grey, never int8's
    red or fp16's green."""
    import pandas as pd

    series = pd.DataFrame([{"series": f"fp32 · e{i}", "precision": "fp32"} for i in range(8)]
                          + [{"series": "fp16 · e0", "precision": "fp16"}, {"series": "int8 · e0", "precision": "int8"}])
    colours = series_colours(series)
    assert len(set(colours.values())) == 10
    extra = {colours[f"fp32 · e{i}"] for i in range(8)} - set(FAMILIES["blue"])
    assert len(extra) == 2 and extra <= set(FAMILIES["grey"]), colours
