"""Serving cells on the dashboard: a real CPU sweep (a tiny CNN on ONNX Runtime, offline and under
MLPerf LoadGen's Server scenario at fixed rates, max batch 2 and 4), its answer on the Overview page
as `farm show` prints it, and each Server cell's LoadGen tests on the Compare page as a
latency-throughput curve, checked against the `serving` rows read straight from the Parquet files
(test_browser_serving.py draws it in a real browser)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mlperf_loadgen")

from farm.cli import main
from farm.dashboard.data import Snapshot, series_labels
from farm.dashboard.serving import answers_of, curve_layers, server_tests
from farm.warehouse import Warehouse
from tests.conftest import tiny_cnn, write_sweep
from tests.dashboard.test_app import open_page, texts

pytestmark = pytest.mark.slow

SWEEP = """name = "served"
[[models]]
source = "tiny.onnx"
[axes]
batch_sizes = [2, 4]
backends = ["onnxruntime"]
scenarios = ["offline", "server"]
[backends.onnxruntime]
intra_op_threads = 1
[serving]
slo_ms = 250
rates = [200, 400]
min_duration_ms = 1000
min_query_count = 600  # LoadGen's early-stopping estimate of p99 needs some hundreds to be VALID
[measurement]
min_duration_ms = 200
repeats = 2
layer_iterations = 0
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("served")
    tiny_cnn(root / "tiny.onnx")
    assert main(["sweep", str(write_sweep(root, SWEEP)), "--results", str(root / "results"), "--executor", "local"]) == 0
    return root / "results"


def test_each_server_cells_tests_are_a_curve_of_its_setup(served: Path) -> None:
    """One point per LoadGen test, on the line of its cell's engine, max batch and delay; passed
    where LoadGen said VALID and p99 is under the bound, as the Parquet rows say; the answer marked."""
    snap = Snapshot(served)
    cells = snap.cell_frame.assign(series=series_labels(snap.cell_frame))
    tests = server_tests(snap, cells)
    stored = Warehouse(served).connect().execute(
        "SELECT s.cell_id, c.batch, s.target_qps, s.valid AND s.latency_p99_ms <= s.slo_ms, s.chosen "
        "FROM serving s JOIN cells c USING (cell_id) ORDER BY 1, 3").fetchall()
    assert len(stored) == 4 and len(tests) == 4
    got = sorted(zip(tests.cell_id, tests.batch, tests.target_qps, tests.result == "passed", tests.answer))
    assert got == sorted(stored)
    assert sorted(tests.setup.unique()) == ["fp32 · onnxruntime · max batch 2 · delay 2 ms",
                                            "fp32 · onnxruntime · max batch 4 · delay 2 ms"]
    layers = curve_layers(tests)
    assert layers[-1]["mark"]["type"] == "rule" and layers[1]["encoding"]["y"]["field"] == "latency_p99_ms"
    assert server_tests(snap, cells[~cells.cell_id.isin(tests.cell_id)]).empty  # the offline cells: none


def test_the_overview_says_what_farm_show_says(served: Path, monkeypatch, capsys: pytest.CaptureFixture) -> None:
    answers = answers_of(Snapshot(served), "served")
    assert len(answers) == 1 and answers[0].startswith("tiny, p99 under 250 ms: serve it on onnxruntime at fp32")
    assert main(["show", "served", "--results", str(served)]) == 0
    assert answers[0] in capsys.readouterr().out
    at = open_page(monkeypatch, served, "overview")
    assert "Serving under a latency bound" in [s.value for s in at.subheader]
    assert answers[0].split(":")[0] in texts(at)
    compare = open_page(monkeypatch, served, "compare")
    assert "Latency against load (LoadGen Server)" in [s.value for s in compare.subheader]
