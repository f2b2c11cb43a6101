"""Regressions: two runs of a sweep compared cell by cell (`farm compare` in the dashboard), or one
precision against another (`--precisions`): the verdict table, worst regression first, and the
layers that explain each slower cell."""

import json

import numpy as np
import pandas as pd
import streamlit as st

from farm.compare import compare_sweeps, render_markdown, summary_line, to_dict
from farm.compare.render import accuracy_text, layer_lines
from farm.dashboard.common import SAME_PRECISION, md, precision_choices, results_root, snapshot_or_stop
from farm.dashboard.data import fingerprint
from farm.errors import UserError

SHOWN_LAYER_TABLES = 20  # slower cells whose layers the page lists (each table costs the browser a moment)


@st.cache_resource(max_entries=16, show_spinner="Comparing…")
def _compare(root: str, stamp: tuple, base: str, new: str, min_effect: float, timing: bool,
             device: bool, precisions: tuple[str, str] | None = None):
    """(the comparison, its verdict table), or the one-line reason there is none (stamp: part of
    the cache key). A resource, not data: 25,000 pairs cost a second to pickle and unpickle at
    every visit; the page only reads them."""
    try:
        comparison = compare_sweeps(base, new, root, min_effect_percent=min_effect, allow_timing_differences=timing,
                                    allow_device_differences=device, precisions=precisions)
    except UserError as exc:
        return str(exc)
    return comparison, verdict_frame(comparison)


def _percent(values) -> np.ndarray:
    """Changes (None or NaN where there is none) in % to 2 decimals, NaN where missing."""
    return np.round(100 * np.array([np.nan if v is None else v for v in values], dtype=np.float64), 2)


def verdict_frame(comparison) -> pd.DataFrame:
    """One row per matched pair, worst regression first: changes in %, medians in ms."""
    pairs = comparison.pairs
    percent = {name: _percent(values) for name, values in (
        ("latency change %", [p.effect.effect for p in pairs]), ("CI low %", [p.effect.low for p in pairs]),
        ("CI high %", [p.effect.high for p in pairs]), ("throughput %", [p.throughput_change for p in pairs]),
        ("p99 %", [p.p99_change for p in pairs]), ("energy/inference %", [p.energy_change for p in pairs]))}
    columns = {"cell": [p.new_id[:8] for p in pairs], "configuration": [p.label for p in pairs],
               "verdict": [p.verdict for p in pairs], **{k: percent[k] for k in list(percent)[:3]},
               "base median ms": [p.base.median if p.base else None for p in pairs],
               "new median ms": [p.new.median if p.new else None for p in pairs],
               **{k: percent[k] for k in list(percent)[3:]}, "accuracy": [accuracy_text(p.accuracy) for p in pairs],
               "notes": ["; ".join(p.notes) for p in pairs], "base cell": [p.base_id[:8] for p in pairs]}
    return pd.DataFrame(columns)  # built by column: 25,000 rows in a fraction of the time row dicts take


snap = snapshot_or_stop()
st.title("Regressions")
sweeps = snap.sweep_names
choices = precision_choices(snap.cell_frame["precision"].dropna().astype(str).tolist())
if len(sweeps) < 2 and len(choices) == 1:
    st.info("Comparing needs two sweeps (two runs of the same sweep file under different names, e.g. "
            "`name = \"nightly-2\"`), or one sweep with two precisions; this warehouse has one sweep of one "
            "precision. `farm compare --base-results DIR` compares sweeps of two warehouses.")
    st.stop()
left, right, middle, third = st.columns([2, 2, 2, 1])
base = left.selectbox("BASE", sweeps, index=max(len(sweeps) - 2, 0), key="reg-base")
new = right.selectbox("NEW", sweeps, index=len(sweeps) - 1, key="reg-new")
chosen = middle.selectbox("precisions (BASE → NEW)", choices, index=0 if len(sweeps) > 1 else 1, key="reg-precisions",
                          help="the same in both: two runs compared; 'bf16 → int8': each NEW cell at int8 against "
                               "BASE's bf16 cell of the same configuration (farm compare --precisions)")
min_effect = third.number_input("minimum effect %", min_value=0.0, max_value=1000.0, value=3.0, step=1.0,
                                key="reg-min-effect")
allow_timing = st.checkbox("compare cells whose timing definitions differ", key="reg-timing")
allow_device = st.checkbox("compare cells measured on different devices", key="reg-device")
root = results_root()
precisions = None if chosen == SAME_PRECISION else tuple(chosen.split(" → "))
found = _compare(str(root), fingerprint(root), base, new, float(min_effect), allow_timing, allow_device, precisions)
if isinstance(found, str):
    st.error(md(found.replace("pass --allow-timing-differences", "tick the timing box above")
                .replace("pass --allow-device-differences", "tick the device box above")
                .replace("--precisions BASE:NEW names", "the precisions chosen above name")))
    st.stop()
comparison, frame = found
counts = comparison.counts()
columns = st.columns(5)
for column, (label, value) in zip(columns, [("Regressed", len(comparison.regressed)), *(
        (name.capitalize(), counts.get(name, 0)) for name in ("slower", "faster", "within noise", "inconclusive"))]):
    column.metric(label, value)
st.caption(md(summary_line(comparison)) + ". 'slower' only where the whole 95 % interval of the change in median "
           "latency lies above the minimum effect; 'within noise' where it lies inside ± the minimum effect; "
           "'inconclusive' where the samples cannot tell (docs/dashboard.md: Comparing two runs).")
for note in comparison.allowed:
    st.warning(note)
st.dataframe(frame, hide_index=True, width="stretch")

explained = [pair for pair in comparison.pairs if pair.layers is not None]
for pair in explained[:SHOWN_LAYER_TABLES]:
    st.subheader(f"{pair.new_id[:8]} {md(pair.label)}: {100 * pair.effect.effect:+.1f} %")
    lines = layer_lines(pair)
    st.caption(md(lines[0]))
    if pair.layers.rows:
        st.dataframe(pd.DataFrame(pair.layers.rows), hide_index=True, width="stretch")
if len(explained) > SHOWN_LAYER_TABLES:
    st.caption(f"The layers of {len(explained) - SHOWN_LAYER_TABLES} more slower cells are in the Markdown and "
               f"JSON downloads below (this page lists the worst {SHOWN_LAYER_TABLES}).")
for side, cells in (("BASE", comparison.only_base), ("NEW", comparison.only_new)):
    if cells:
        st.markdown(f"**Only in {side}** (no cell of the same configuration in the other sweep):\n"
                    + "\n".join(f"- {md(c)}" for c in cells))
one, two, _ = st.columns([1, 1, 6])
one.download_button("Markdown", data=lambda: render_markdown(comparison), file_name=f"compare-{base}-{new}.md",
                    key="reg-md", on_click="ignore")
two.download_button("JSON", data=lambda: json.dumps(to_dict(comparison), indent=1, default=str),
                    file_name=f"compare-{base}-{new}.json", key="reg-json",
                    on_click="ignore")
