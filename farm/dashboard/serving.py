"""Serving cells on the dashboard and in the report: per model and p99 bound, which setup served the
most (farm.queries.serving_answers, as `farm show` says it), and each Server cell's LoadGen tests as
a latency-throughput curve: p99 against the rate offered, one line per engine setup, the bound drawn."""

from __future__ import annotations

from typing import Any

import pandas as pd

from farm.dashboard.data import Snapshot
from farm.serving.search import meets

SERVER_TESTS_SQL = """SELECT s.cell_id, s.test, s.target_qps, s.samples_per_s, s.latency_p50_ms, s.latency_p99_ms,
       s.valid, s.chosen, s.slo_ms, s.max_delay_ms, s.energy_per_sample_mj, s.why_invalid
FROM serving s WHERE s.scenario = 'server' AND list_contains($ids, s.cell_id) AND s.error IS NULL
ORDER BY s.cell_id, s.target_qps, s.test"""


def answers_of(snap: Snapshot, sweep: str) -> list[str]:
    """The sweep's serving answers in words, over the cells of its latest plan."""
    from farm.queries import serving_answers

    snap.load_serving([sweep])
    return serving_answers(snap.warehouse, snap.con, sweep, snap.warehouse.latest_plan(sweep))


def server_tests(snap: Snapshot, cells: pd.DataFrame) -> pd.DataFrame:
    """The Server scenario's LoadGen tests of `cells` (rows of the cell frame, with `series`), one row
    each: the rate asked and served, p50 and p99, whether it passed (VALID with p99 under the bound),
    and `setup`, the line it belongs to: the cell's series, max batch and batcher delay."""
    if cells.empty:
        return pd.DataFrame()
    snap.load_serving(sorted(cells.sweep_id.unique()))
    tests = snap.query(SERVER_TESTS_SQL, {"ids": cells.cell_id.tolist()})
    if tests.empty:
        return tests
    tests = tests.merge(cells[["cell_id", "model", "series", "batch", "label"]], on="cell_id")
    tests["setup"] = (tests.series + " · max batch " + tests.batch.astype(int).astype(str) + " · delay "
                      + tests.max_delay_ms.map(lambda d: f"{d:g} ms"))
    tests["result"] = ["passed" if meets(bool(valid), None, p99, bound) else "failed"  # errors: left out above
                       for valid, p99, bound in zip(tests.valid, tests.latency_p99_ms, tests.slo_ms)]
    tests["answer"] = tests.chosen.astype(bool)
    return tests


def curve_layers(tests: pd.DataFrame, log_y: bool = True) -> list[dict[str, Any]]:
    """Vega-Lite layers of one model's curves: a line per setup through its tests in order of rate,
    a point per test (filled where it passed, a cross where it failed, larger for the cell's answer),
    and a dashed rule at each p99 bound."""
    # the rate offered (LoadGen's Poisson rate), not the rate served: past the knee an engine serves less
    # than it is offered, and a line through served rates would turn back on itself
    x = {"field": "target_qps", "type": "quantitative", "title": "queries/s offered (LoadGen's Poisson rate)"}
    y = {"field": "latency_p99_ms", "type": "quantitative", "title": "p99 latency (ms), queueing included",
         "scale": {"type": "log"} if log_y else {"zero": False}}
    color = {"field": "setup", "type": "nominal", "title": "setup", "legend": {"orient": "right", "labelLimit": 0}}
    tooltip = [{"field": f, "type": t, **({"format": fmt} if fmt else {})} for f, t, fmt in (
        ("setup", "nominal", None), ("target_qps", "quantitative", ",.0f"), ("samples_per_s", "quantitative", ",.0f"),
        ("latency_p50_ms", "quantitative", ".3g"), ("latency_p99_ms", "quantitative", ".3g"),
        ("result", "nominal", None), ("answer", "nominal", None), ("energy_per_sample_mj", "quantitative", ".3g"),
        ("why_invalid", "nominal", None))]
    layers: list[dict[str, Any]] = [
        {"mark": {"type": "line", "opacity": 0.6}, "encoding": {"x": x, "y": y, "color": color,
                                                               "order": {"field": "target_qps"}}},
        {"mark": {"type": "point", "filled": True}, "encoding": {
            "x": x, "y": y, "color": color, "tooltip": tooltip,
            "shape": {"field": "result", "type": "nominal", "title": "LoadGen test",
                      "scale": {"domain": ["passed", "failed"], "range": ["circle", "cross"]}},
            "size": {"field": "answer", "type": "nominal", "title": "rate",
                     "scale": {"domain": [True, False], "range": [160, 50]},
                     "legend": {"labelExpr": "datum.label == 'true' ? 'the answer' : 'tried'"}}}},
    ]
    if tests.slo_ms.notna().any():
        layers.append({"mark": {"type": "rule", "strokeDash": [6, 4], "color": "#b00"},
                       "transform": [{"filter": "isValid(datum.slo_ms)"}],
                       "encoding": {"y": {"field": "slo_ms", "type": "quantitative"}}})
    return layers


def draw_curves(tests: pd.DataFrame, log_y: bool = True) -> None:
    """The Compare page's section: one chart per model of `server_tests`."""
    import streamlit as st

    from farm.dashboard.common import md

    st.subheader("Latency against load (LoadGen Server)")
    st.caption("Each Server cell's MLPerf LoadGen tests: p99 latency, the wait in farm's batcher included, against "
               "the rate LoadGen offered (the rate served is in each point's tooltip). A cross: the test failed "
               "(INVALID, or p99 over the bound, dashed); the large point: the cell's answer, the highest rate that "
               "passed (twice where farm searched for it: docs/config.md#serving).")
    for model in sorted(tests.model.unique()):
        rows = tests[tests.model == model].drop(columns=["label", "series"])
        st.markdown(f"**{md(model)}**")
        height = max(320, 30 * rows.setup.nunique() + 280)  # the legends beside it: setups, results, answer
        st.vega_lite_chart(rows, {"height": height, "layer": curve_layers(rows, log_y),
                                  "usermeta": {"embedOptions": {"renderer": "svg"}}}, width="stretch")
