"""Diff: two cells side by side (fp32 against fp16, one TensorRT version against another), with
their layers matched and the time and memory deltas."""

import altair as alt
import pandas as pd
import streamlit as st

from farm.compare.stats import RULE_TEXT, ratio_interval, verdicts
from farm.dashboard.common import cell_picker, downloads, human_bytes, md, snapshot_or_stop
from farm.dashboard.data import number
from farm.dashboard.layer_tables import layer_coverage, layer_diff, layer_kinds, layers_not_comparable
from farm.layers.coverage import coverage_note

snap = snapshot_or_stop()
st.title("Diff")
ok = snap.cell_frame[snap.cell_frame.status == "ok"]
if len(ok) < 2:
    st.info("A diff needs two measured cells; this warehouse has fewer.")
    st.stop()


def partner(cell_id: str) -> str:
    """A sensible B for A: the same cell at another precision (same model, batch, backend, options
    and profile), else the same model and batch on anything, else any other cell."""
    a = snap.cell(cell_id)
    others = ok[ok.cell_id != cell_id]
    same_shape = others[(others.model == a.model) & (others.batch == a.batch)]
    same_setup = same_shape[(same_shape.backend == a.backend) & (same_shape.options == a.options)
                            & (same_shape.profile.fillna("") == (a.profile or ""))]
    for pick in (same_setup[same_setup.precision != a.precision], same_setup, same_shape, others):
        if len(pick):
            return pick.cell_id.iloc[0]
    return cell_id


left, right = st.columns(2)
with left:
    fp32 = ok[ok.precision == "fp32"]
    a_id = cell_picker(snap, "A", "a", default=fp32.cell_id.iloc[0] if len(fp32) else None, only_ok=True)
with right:
    b_id = cell_picker(snap, "B", "b", default=partner(a_id), only_ok=True)
a, b = snap.cell(a_id), snap.cell(b_id)
if a_id == b_id:
    st.warning("A and B are the same cell: pick another B.")

st.subheader("Figures")
rows = [("throughput (qps)", "throughput_qps", True), ("samples/s", "throughput_samples_per_s", True),
        ("p50 latency (ms)", "latency_median_ms", False), ("p99 latency (ms)", "latency_p99_ms", False),
        ("compute mean (ms)", "compute_mean_ms", False), ("build (s)", "build_s", False)]
for label, field, higher_is_better in rows:
    x, y = a[field], b[field]
    columns = st.columns([2, 2, 2, 3])
    columns[0].markdown(f"**{label}**")
    columns[1].markdown(f"A: {number(x)}")
    columns[2].markdown(f"B: {number(y)}")
    if pd.notna(x) and pd.notna(y) and x:
        change = (y - x) / x
        better = (change > 0) == higher_is_better
        columns[3].markdown(f":{'green' if better else 'red'}[{change:+.1%}] B against A")
noise = snap.median_intervals([a_id, b_id])  # each median's interval from the cell's raw samples
ratio, ratio_low, ratio_high = ratio_interval(*noise.loc[a_id, ["noise_median_ms", "noise_low_ms", "noise_high_ms"]],
                                              *noise.loc[b_id, ["noise_median_ms", "noise_low_ms", "noise_high_ms"]])
verdict = verdicts(ratio_low, ratio_high)
basis = ("both cells' raw samples" if set(noise.noise_source) == {"samples"}
         else "the stored intervals of a cell without raw samples (an ingested summary): a rougher test")
if pd.notna(ratio):
    interval = f"{ratio_low:.3f} – {ratio_high:.3f}" if pd.notna(ratio_low) else "no interval"
    summary = {"faster": "B is **faster**", "slower": "B is **slower**",
               "within noise": "the latency difference is **within noise**",
               "inconclusive": "**inconclusive**: the samples cannot tell a change that matters from none",
               "not judged": "**not judged**: a cell has no interval to judge the difference by"}[verdict]
    st.caption(f"Median latency B / A = {ratio:.3f} (95 % interval {interval}, from {basis}): {summary} "
               f"({RULE_TEXT}).")
st.caption(f"Accuracy: A {a.verdict or 'not checked'}, B {b.verdict or 'not checked'}.")

st.subheader("Layers")
layers_a, layers_b = snap.cell_file(a_id, "layers"), snap.cell_file(b_id, "layers")
if layers_a.empty or layers_b.empty:
    st.info("Both cells need per-layer rows for a layer diff.")
    st.stop()
reason = layers_not_comparable(layers_a, layers_b, a.backend, b.backend)
if reason:  # eager graph ops against compiled kernels: neither the sums nor the rows line up
    st.warning(f"Layers not diffed: {md(reason)}.")
    st.stop()
kind = layer_kinds(layers_a, a.backend).iloc[0]
for side, cell_id, frame in (("A", a_id, layers_a), ("B", b_id, layers_b)):
    note = coverage_note(layer_coverage(snap, cell_id, frame))
    if note:
        st.warning(f"{side}: {md(note)}.")
diff = layer_diff(layers_a, layers_b, a.backend, b.backend)
matched = diff[diff.match == "both"]
only_a, only_b = diff[diff.match == "only A"], diff[diff.match == "only B"]
columns = st.columns(5)
columns[0].metric("Matched layers", len(matched))
columns[1].metric("Only in A", len(only_a))
columns[2].metric("Only in B", len(only_b))
unmatched = (f"Unmatched: only in A {len(only_a)} layers, {only_a.time_avg_ms_a.sum():.4g} ms; only in B "
             f"{len(only_b)} layers, {only_b.time_avg_ms_b.sum():.4g} ms (not set against anything).")
if matched.empty:  # no per-layer comparison, and no total that would pass for one
    st.warning(f"No layer of A matched a layer of B by name (with TensorRT's renamings undone): the two cells' "
               f"layers cannot be compared one by one, and their totals are not set against each other. {unmatched}")
else:
    all_a, all_b = layers_a.time_avg_ms.sum(), layers_b.time_avg_ms.sum()
    total_a, total_b = matched.time_avg_ms_a.sum(), matched.time_avg_ms_b.sum()
    columns[3].metric("Σ layer time B − A (ms)", f"{all_b - all_a:+.4g}",
                      help="all layers of both cells (rows of the same kind), matched or not: not coloured")
    columns[4].metric("Σ matched layer time B − A (ms)", f"{total_b - total_a:+.4g}",
                      delta=f"{(total_b - total_a) / total_a:+.1%}" if total_a else None, delta_color="inverse",
                      help="the matched layers only: red where B is slower, green where faster")
    st.caption(f"Rows: {kind or 'of unknown kind'}, on both sides. Σ over the {len(matched)} matched layers: A "
               f"{total_a:.4g} ms, B {total_b:.4g} ms (all layers: A {all_a:.4g} ms, B {all_b:.4g} ms); memory A "
               f"{human_bytes(layers_a.total_bytes.sum(min_count=1))}, B "
               f"{human_bytes(layers_b.total_bytes.sum(min_count=1))}. Layers match by name, with TensorRT's "
               "renamings undone; sorted by the size of the time change. "
               + (unmatched if len(only_a) + len(only_b) else ""))
changed = pd.DataFrame({  # plain floats and strings: what the chart needs, nothing nullable
    "layer": matched.name_a.astype(str), "name_b": matched.name_b.astype(str),
    "time_delta_ms": matched.time_delta_ms.astype(float), "time_avg_ms_a": matched.time_avg_ms_a.astype(float),
    "time_avg_ms_b": matched.time_avg_ms_b.astype(float),
    "time_delta_percent": matched.time_delta_percent.astype(float)}).head(15)
changed["direction"] = changed.time_delta_ms.map(lambda d: "B slower" if d > 0 else "B faster")
if not changed.empty:
    st.markdown("**Largest per-layer time changes of matched layers** (red: B slower, green: B faster)")
    st.altair_chart(alt.Chart(changed).mark_bar().encode(
        alt.X("time_delta_ms:Q", title="B − A (ms per query)"),
        alt.Y("layer:N", sort="x", title=None, axis=alt.Axis(labelOverlap=False, labelLimit=320)),
        color=alt.Color("direction:N", scale=alt.Scale(domain=["B slower", "B faster"], range=["#d62728", "#2ca02c"]),
                        legend=None),
        tooltip=["layer", "name_b", "time_avg_ms_a", "time_avg_ms_b", "time_delta_percent"],
    ).properties(height=max(120, 22 * len(changed) + 40)), width="stretch")
show = st.radio("Show", ["all", "matched", "only A", "only B"], horizontal=True, key="diff-show")
shown = diff if show == "all" else diff[diff.match == ({"matched": "both"}.get(show, show))]
st.dataframe(shown, hide_index=True, column_config={
    "time_avg_ms_a": st.column_config.NumberColumn("A ms", format="%.4g"),
    "time_avg_ms_b": st.column_config.NumberColumn("B ms", format="%.4g"),
    "time_delta_ms": st.column_config.NumberColumn("Δ ms", format="%+.4g"),
    "time_delta_percent": st.column_config.NumberColumn("Δ %", format="%+.1f"),
    "total_bytes_a": st.column_config.NumberColumn("A bytes", format="%d"),
    "total_bytes_b": st.column_config.NumberColumn("B bytes", format="%d"),
    "bytes_delta": st.column_config.NumberColumn("Δ bytes", format="%+d"),
})
downloads(diff, f"diff-{a_id[:8]}-{b_id[:8]}", "diff-table")
