"""Layer rows of different kinds (eager PyTorch's graph ops, torch.compile's kernels) are never
summed or diffed together, and every place that shows layers says how much of the compute time
they cover, warning under 80 %. Real cells: the tiny CNN on PyTorch CPU, eager and compiled."""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")

from farm.cli import main
from farm.dashboard.data import Snapshot
from farm.dashboard.layer_tables import LayersNotComparable, layer_diff, layers_not_comparable
from farm.layers.coverage import COVERAGE_WARN_PERCENT
from tests.conftest import tiny_cnn, write_sweep
from tests.dashboard.test_app import metrics, open_page, texts

SWEEP = """
name = "kinds"
[[models]]
source = "models/tiny.onnx"
[axes]
backends = ["torch"]
batch_sizes = [2]
[backends.torch]
device = "cpu"
mode = ["eager", "compile"]
"""


@pytest.fixture(scope="module")
def kinds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("kinds")
    (base / "models").mkdir()
    tiny_cnn(base / "models" / "tiny.onnx", channels=8, spatial=16)
    results = base / "results"
    assert main(["sweep", str(write_sweep(base, SWEEP)), "--results", str(results), "--executor", "local"]) == 0
    return results


def eager_and_compiled(snap: Snapshot) -> tuple[str, str]:
    cells = snap.cell_frame[snap.cell_frame.status == "ok"]
    assert len(cells) == 2, snap.cell_frame[["options", "status", "reason"]]
    by_mode = {('"compile"' in options): cell_id for cell_id, options in zip(cells.cell_id, cells.options)}
    return by_mode[False], by_mode[True]


def test_rows_are_kinded_and_coverage_is_stored(kinds: Path) -> None:
    snap = Snapshot(kinds)
    eager, compiled = eager_and_compiled(snap)
    assert set(snap.cell_file(eager, "layers").kind) == {"graph op"}
    assert set(snap.cell_file(compiled, "layers").kind) == {"kernel"}
    for cell_id in (eager, compiled):
        layers = snap.cell_file(cell_id, "layers")
        m = snap.query("SELECT layer_coverage_percent, compute_median_ms FROM measurements WHERE cell_id = ?",
                       [cell_id]).iloc[0]
        assert m.layer_coverage_percent == pytest.approx(100 * layers.time_avg_ms.sum() / m.compute_median_ms)


def test_eager_against_compiled_is_not_diffed(monkeypatch, kinds: Path) -> None:
    snap = Snapshot(kinds)
    eager, compiled = eager_and_compiled(snap)
    layers_a, layers_b = snap.cell_file(eager, "layers"), snap.cell_file(compiled, "layers")
    reason = layers_not_comparable(layers_a, layers_b, "torch", "torch")
    assert "not comparable" in reason and "graph ops" in reason and "kernels" in reason
    with pytest.raises(LayersNotComparable, match="not comparable"):
        layer_diff(layers_a, layers_b, "torch", "torch")
    assert layers_not_comparable(layers_a, layers_a, "torch", "torch") is None  # same kind: diffed
    # rows written before the kind column: the kind comes from the backend and the type
    old_a, old_b = layers_a.assign(kind=None), layers_b.assign(kind=None)
    with pytest.raises(LayersNotComparable):
        layer_diff(old_a, old_b, "torch", "torch")

    at = open_page(monkeypatch, kinds, "diff", a=eager, b=compiled)
    assert at.selectbox(key="b-cell").value == compiled
    page = texts(at)
    assert "Layers not diffed: the layers are not comparable" in page
    assert "Matched layers" not in metrics(at) and "Σ layer time B − A (ms)" not in metrics(at)
    at = open_page(monkeypatch, kinds, "diff", a=eager, b=eager)  # same kind: the layer diff is there
    assert "Matched layers" in metrics(at) and "not comparable" not in texts(at)


def with_coverage(kinds: Path, copy: Path, percent: float) -> Path:
    """A copy of the warehouse whose measurements rows say the layers cover `percent` %."""
    shutil.copytree(kinds, copy)
    shutil.rmtree(copy / ".cache", ignore_errors=True)  # the dashboard's consolidated copy of the tables
    for path in (copy / "kinds" / "measurements").glob("*.parquet"):
        table = pq.read_table(path)
        index = table.schema.get_field_index("layer_coverage_percent")
        table = table.set_column(index, "layer_coverage_percent", pa.array([percent] * table.num_rows, pa.float64()))
        pq.write_table(table, path)
    return copy


def test_coverage_under_80_percent_is_said_everywhere(monkeypatch, kinds: Path, tmp_path: Path, capsys) -> None:
    from farm.report.html import write_report

    assert COVERAGE_WARN_PERCENT == 80
    low = with_coverage(kinds, tmp_path / "low", 3.0)
    warning = "layers cover 3 % of compute: per-layer times are partial"
    eager, compiled = eager_and_compiled(Snapshot(low))
    at = open_page(monkeypatch, low, "cell", cell=compiled)
    assert warning in [w.value for w in at.warning]
    at = open_page(monkeypatch, low, "diff", a=eager, b=eager)
    assert f"A: {warning}." in texts(at) and f"B: {warning}." in texts(at)
    write_report(low, "kinds", tmp_path / "low.html")
    assert warning in (tmp_path / "low.html").read_text()
    assert main(["show", "kinds", "--results", str(low), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [row["layers % of compute"] for row in rows] == ["3 (partial)", "3 (partial)"]

    high = with_coverage(kinds, tmp_path / "high", 95.0)
    at = open_page(monkeypatch, high, "cell", cell=compiled)
    assert not any("per-layer times are partial" in w.value for w in at.warning)
    assert "95 % of the compute time" in texts(at)
    write_report(high, "kinds", tmp_path / "high.html")
    assert "per-layer times are partial" not in (tmp_path / "high.html").read_text()
    assert main(["show", "kinds", "--results", str(high), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [row["layers % of compute"] for row in rows] == ["95", "95"]

    over = with_coverage(kinds, tmp_path / "over", 172.0)  # the per-layer run's own cost in the rows
    at = open_page(monkeypatch, over, "cell", cell=compiled)
    assert any(w.value.startswith("layers sum to 172 % of compute: the per-layer run times each layer on its own")
               for w in at.warning), [w.value for w in at.warning]


def test_ingested_engines_are_engine_layers_and_onnxruntime_rows_graph_ops(warehouse: Path) -> None:
    """The writer sets the kind from the backend where a row does not say: ingested TensorRT
    engines (no ingest code sets it) are engine layers; they are not diffed against graph ops."""
    snap = Snapshot(warehouse)
    ok = snap.cell_frame[snap.cell_frame.status == "ok"]
    trt = ok[ok.sweep_id == "trt"].cell_id.tolist()
    ort = ok[ok.backend == "onnxruntime"].cell_id.iloc[0]
    assert trt and all(set(snap.cell_file(c, "layers").kind) == {"engine layer"} for c in trt
                       if not snap.cell_file(c, "layers").empty)
    assert set(snap.cell_file(ort, "layers").kind) == {"graph op"}
    engine = next(c for c in trt if not snap.cell_file(c, "layers").empty)
    reason = layers_not_comparable(snap.cell_file(ort, "layers"), snap.cell_file(engine, "layers"),
                                   "onnxruntime", "tensorrt")
    assert "ONNX graph ops" in reason and "TensorRT engine layers" in reason


def test_cell_page_of_kernels_is_a_searchable_list_and_the_default_cell_has_edges(monkeypatch, kinds: Path) -> None:
    """A compiled cell's kernels name no tensors: the Cell page lists them (searchable) instead of
    drawing unconnected boxes; with no cell asked for, the page opens the eager cell, whose graph ops
    have edges."""
    from farm.dashboard.layer_tables import default_cell, has_layer_edges

    snap = Snapshot(kinds)
    eager, compiled = eager_and_compiled(snap)
    assert default_cell(snap) == eager and has_layer_edges(snap.cell_file(eager, "layers"))
    at = open_page(monkeypatch, kinds, "cell")
    assert at.selectbox(key="cell-cell").value == eager
    assert "Engine graph" in [s.value for s in at.subheader]

    kernels = snap.cell_file(compiled, "layers")
    at = open_page(monkeypatch, kinds, "cell", cell=compiled)
    assert "Engine graph" not in [s.value for s in at.subheader] and "Layers in execution order" in [
        s.value for s in at.subheader]
    listed = next(d.value for d in at.dataframe if "total_mib" in d.value.columns and "tactic" not in d.value)
    assert listed.name.tolist() == kernels.sort_values("layer_index").name.tolist()
    word = kernels.name.iloc[0].split("_")[0]  # e.g. "triton" or "cpp"
    at.text_input(key="layer-search").set_value(word).run()
    listed = next(d.value for d in at.dataframe if "total_mib" in d.value.columns and "tactic" not in d.value)
    expected = [n for n in kernels.sort_values("layer_index").name if word.lower() in n.lower()]
    assert listed.name.tolist() == expected and f"{len(expected)} of {len(kernels)} layers match" in texts(at)


def test_diff_of_two_engines_with_no_layer_in_common_says_so(monkeypatch, tmp_path: Path) -> None:
    """Same kind (engine layers), nothing matches: no total is set against the other, no colour."""
    from tests.ingest.test_trt_fixtures import SEEDS

    results = tmp_path / "results"
    for files in (["fpn_int8.profile.json", "fpn_int8.build_verbose.log"],
                  ["centernet_int8.layer_info.log", "centernet_int8.profile.json"]):
        assert main(["ingest", *[str(SEEDS / f) for f in files], "--results", str(results)]) == 0
    snap = Snapshot(results)
    fpn = snap.cell_frame[snap.cell_frame.model == "fpn_int8"].cell_id.iloc[0]
    centernet = snap.cell_frame[snap.cell_frame.model == "centernet_int8"].cell_id.iloc[0]
    at = open_page(monkeypatch, results, "diff", a=fpn, b=centernet)
    shown = metrics(at)
    assert shown["Matched layers"] == "0" and shown["Only in A"] == "113" and shown["Only in B"] == "54"
    assert not any(label.startswith("Σ") for label in shown)
    assert not any(m.delta for m in at.metric)
    warning = next(w.value for w in at.warning if "No layer of A matched" in w.value)
    assert "only in A 113 layers, 4.871 ms; only in B 54 layers, 2.596 ms" in warning
