"""The History page through Streamlit's AppTest: the series and change points it shows are `farm
history`'s (tests/test_history.py's synthetic nights: a 10 % step at run 20, and a flat series)."""

from __future__ import annotations

from pathlib import Path

from farm.history import history
from tests.dashboard.test_app import metrics, open_page, texts
from tests.test_history import noisy, write_series


def test_history_page_shows_the_change_point_first(monkeypatch, tmp_path: Path) -> None:
    results = tmp_path / "results"
    write_series(results, {"stepped": noisy(1, step_at=20), "flat": noisy(2)})
    at = open_page(monkeypatch, results, "history")
    assert at.title[0].value == "History"
    assert metrics(at) == {"Configurations in 2+ sweeps": "2", "With a change point": "1"}
    [change] = history(results)[0].changes
    assert "stepped · fp32 · b1 · onnxruntime: at night-20: +" in texts(at) and change.sweep == "night-20"
    table = at.dataframe[0].value
    assert list(table.sweep) == [f"night-{i:02d}" for i in range(30)] and len(at.get("vega_lite_chart")) == 1
    at.selectbox(key="hist-series").set_value(1).run()  # the flat one: no change point, said so
    assert not at.exception and "No change point in 30 runs" in texts(at)


def test_history_page_with_one_sweep_says_how_to_build_a_history(monkeypatch, tmp_path: Path) -> None:
    results = tmp_path / "results"
    write_series(results, {"once": [1.0]})
    at = open_page(monkeypatch, results, "history")
    assert "--sweep nightly-" in at.info[0].value
