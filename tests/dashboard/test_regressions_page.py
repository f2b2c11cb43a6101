"""The Regressions page through Streamlit's AppTest, on real sweeps of a tiny CNN (tests/test_compare.py's
`runs`: 'base', 'again', and 'planted' with a convolution doing 12 times the work): the verdicts,
figures and explaining layers it shows are `farm compare`'s."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.compare import SLOWER, compare_sweeps
from tests.dashboard.test_app import metrics, open_page, texts
from tests.test_compare import MIN_EFFECT, copy_sweep
from tests.test_compare import runs as runs


def test_regressions_page_shows_the_planted_slowdown(monkeypatch, runs: Path) -> None:
    at = open_page(monkeypatch, runs, "regressions")
    assert at.title[0].value == "Regressions"
    at.selectbox(key="reg-base").set_value("base")
    at.selectbox(key="reg-new").set_value("planted")
    at.number_input(key="reg-min-effect").set_value(float(MIN_EFFECT)).run()
    assert not at.exception, [e.message for e in at.exception]
    expected = compare_sweeps("base", "planted", runs, min_effect_percent=float(MIN_EFFECT))
    slower = [p for p in expected.pairs if p.verdict == SLOWER]
    assert slower
    shown = metrics(at)
    assert shown["Regressed"] == str(len(expected.regressed)) and shown["Slower"] == str(len(slower))
    table = at.dataframe[0].value
    assert list(table.cell) == [p.new_id[:8] for p in expected.pairs]  # worst regression first
    assert table.verdict.iloc[0] == SLOWER
    for pair in expected.pairs:
        row = table.set_index("cell").loc[pair.new_id[:8]]
        assert row.verdict == pair.verdict and row.configuration == pair.label
        assert row["latency change %"] == pytest.approx(round(100 * pair.effect.effect, 2))
        assert row["new median ms"] == pytest.approx(pair.new.median)
        assert "model file differs" in row.notes
    layers = at.dataframe[1].value  # the first slower cell's explaining layers
    assert layers.name_new.str.contains("_planted").any() and (layers.added_ms > 0).all()
    assert "layers cover" in texts(at) and f"{slower[0].new_id[:8]} {slower[0].label}" in \
        [s.value.split(":")[0] for s in at.subheader][0]
    assert {b.label for b in at.get("download_button")} >= {"Markdown", "JSON"}


def test_regressions_page_same_sweep(monkeypatch, runs: Path) -> None:
    at = open_page(monkeypatch, runs, "regressions")
    at.selectbox(key="reg-base").set_value("base")
    at.selectbox(key="reg-new").set_value("again")
    at.number_input(key="reg-min-effect").set_value(float(MIN_EFFECT)).run()
    assert not at.exception
    assert metrics(at)["Regressed"] == "0" and metrics(at)["Slower"] == "0"
    assert len(at.dataframe[0].value) == 2 and not at.subheader  # no slower cell, no layers
    at.selectbox(key="reg-new").set_value("base").run()  # a sweep against itself: effect 0, nothing regressed
    shown = metrics(at)
    assert shown["Regressed"] == "0" and int(shown["Within noise"]) + int(shown["Inconclusive"]) == 2
    assert (at.dataframe[0].value["latency change %"] == 0).all()


def test_regressions_page_without_two_sweeps(monkeypatch, runs: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    at = open_page(monkeypatch, tmp_path / "empty", "regressions")
    assert "No results yet" in at.info[0].value and not at.dataframe
    examples = Path(__file__).resolve().parents[2] / "examples" / "results"
    if [p.name for p in examples.iterdir() if p.is_dir()] == ["gpu-resnet50"]:  # one sweep: nothing to compare
        at = open_page(monkeypatch, examples, "regressions")
        assert at.title[0].value == "Regressions" and "Comparing needs two sweeps" in at.info[0].value
    at = open_page(monkeypatch, copy_sweep(runs, "base", tmp_path / "one"), "regressions")
    assert at.title[0].value == "Regressions" and "Comparing needs two sweeps" in at.info[0].value


def test_regressions_page_compares_one_precision_with_another_in_one_sweep(monkeypatch, tmp_path: Path) -> None:
    """A warehouse of one sweep at fp32 and fp16: the page no longer stops (two precisions are something
    to compare), offers 'fp32 → fp16' first, and shows what `farm compare --precisions fp32:fp16` finds."""
    from farm.dashboard.common import SAME_PRECISION as SAME
    from farm.dashboard.common import precision_choices
    from tests.conftest import swept_tiny, tiny_sweep_text

    assert precision_choices(["fp16", "int8", "fp32", "fp16"]) == [
        SAME, "fp32 → fp16", "fp32 → int8", "fp16 → fp32", "fp16 → int8", "int8 → fp32", "int8 → fp16"]
    results = swept_tiny(tmp_path, tiny_sweep_text("mixed", batch_sizes=(1,), precisions=("fp32", "fp16")))
    at = open_page(monkeypatch, results, "regressions")
    assert not at.exception and not at.info, [i.value for i in at.info]
    assert at.selectbox(key="reg-precisions").value == "fp32 → fp16"
    expected = compare_sweeps("mixed", "mixed", results, precisions=("fp32", "fp16"))
    table = at.dataframe[0].value
    assert list(table.cell) == [p.new_id[:8] for p in expected.pairs] and len(table) == 1
    assert list(table.verdict) == [p.verdict for p in expected.pairs]
    at.selectbox(key="reg-precisions").set_value(SAME).run()  # the sweep against itself: nothing changed
    assert metrics(at)["Regressed"] == "0" and (at.dataframe[0].value["latency change %"] == 0).all()
