"""Cell: one cell's latency distribution, its GPU telemetry (energy, power, clocks, throttling),
H2D / compute / D2H split, top layers by time and by memory, its engine graph, and where the figures
came from."""

import json
import shutil

import altair as alt
import pandas as pd
import streamlit as st

from farm.dashboard.common import cell_picker, downloads, human_bytes, snapshot_or_stop
from farm.dashboard.data import number
from farm.dashboard.layers import graph_rows, layer_coverage, layer_kinds, top_layers
from farm.dashboard.telemetry import has_telemetry, telemetry_caption, telemetry_metrics, throttle_warning
from farm.layers.coverage import coverage_note

GRAPH_LAYER_LIMIT = 400  # larger graphs take graphviz seconds to minutes: drawn on request

snap = snapshot_or_stop()
st.title("Cell")
cell_id = cell_picker(snap, "Cell", "cell")
cell = snap.cell(cell_id)
st.caption(f"`{cell_id}`")
if cell.status != "ok":
    st.error(f"**{cell.status}**: {cell.reason or 'no reason recorded'}")
    traceback = snap.query("SELECT traceback FROM cells WHERE cell_id = ?", [cell_id]).traceback.iloc[0]
    if traceback:
        with st.expander("Traceback"):
            st.code(traceback)
    st.stop()

columns = st.columns(6)
columns[0].metric("Throughput (qps)", number(cell.throughput_qps))
columns[1].metric("Samples/s", number(cell.throughput_samples_per_s))
columns[2].metric("p50 latency (ms)", number(cell.latency_median_ms))
columns[3].metric("p99 latency (ms)", number(cell.latency_p99_ms))
columns[4].metric("CV", f"{cell.latency_cv_percent:.2f} %" if pd.notna(cell.latency_cv_percent) else "–",
                  help="coefficient of variation of the latencies")
columns[5].metric("Stable", "–" if pd.isna(cell.stable) else "yes" if cell.stable else "no")
if pd.notna(cell.median_ci_low_ms):
    st.caption(f"Median latency 95 % confidence interval: {cell.median_ci_low_ms:.4g} – {cell.median_ci_high_ms:.4g} ms "
               f"over {int(cell.queries)} counted queries.")
if pd.isna(cell.throughput_qps):
    st.caption("No timing for this cell: an ingested TensorRT result with a per-layer profile only.")
throttled = throttle_warning(cell)
if throttled:
    st.warning(throttled)
accuracy = snap.query("SELECT * FROM accuracy WHERE cell_id = ?", [cell_id])
if not accuracy.empty:
    verdict = "pass" if (accuracy.verdict == "pass").all() else "fail"
    (st.success if verdict == "pass" else st.error)(
        f"Accuracy against the fp32 reference: **{verdict}** (worst: "
        + ", ".join(f"{r.output_name} {r.worst_metric} {r.worst_value:.6g}" for r in accuracy.itertuples()) + ")")

if has_telemetry(cell):
    st.subheader("GPU telemetry")
    for column, (label, value, help_text) in zip(st.columns(7), telemetry_metrics(cell)):
        column.metric(label, value, help=help_text)
if telemetry_caption(cell):
    st.caption(telemetry_caption(cell))

st.subheader("Latency")
samples = snap.cell_file(cell_id, "samples")
if samples.empty:
    st.info("This cell kept no raw samples (an ingested TensorRT result gives only its summary).")
else:
    marks = pd.DataFrame({"ms": [cell.latency_median_ms, cell.latency_p99_ms], "mark": ["p50", "p99"]})
    histogram = alt.Chart(samples).mark_bar().encode(
        alt.X("latency_ms:Q", bin=alt.Bin(maxbins=60), title="latency (ms)"), alt.Y("count():Q", title="queries"))
    rules = alt.Chart(marks).mark_rule(strokeDash=[4, 2]).encode(x="ms:Q", color=alt.Color("mark:N", title=None),
                                                                 tooltip=["mark", "ms"])
    left, right = st.columns(2)
    left.markdown(f"**Histogram** of {len(samples):,} raw samples")
    left.altair_chart((histogram + rules).properties(height=300), width="stretch")
    order = samples.assign(query=range(len(samples)))
    if len(order) > 20_000:  # enough to see drift; the browser stays quick
        order = order.iloc[:: len(order) // 20_000 + 1]
    right.markdown("**Over time**: each query in the order it ran, coloured by repeat")
    right.altair_chart(alt.Chart(order).mark_circle(size=8, opacity=0.6).encode(
        alt.X("query:Q", title="query"), alt.Y("latency_ms:Q", title="latency (ms)", scale=alt.Scale(zero=False)),
        color=alt.Color("repeat:N")).properties(height=300), width="stretch")
    downloads(samples, f"samples-{cell_id[:8]}", "cell-samples")

st.subheader("Where a query's time goes")
phases = pd.DataFrame({"phase": ["H2D", "compute", "D2H"],
                       "ms": [cell.h2d_mean_ms, cell.compute_mean_ms, cell.d2h_mean_ms]}).dropna()
if phases.empty or (len(phases) == 1 and phases.phase.iloc[0] == "compute"):
    st.caption("On a CPU backend the whole query is compute: there are no copies to split out "
               f"(mean {number(cell.compute_mean_ms)} ms).")
else:
    phases["share"] = phases.ms / phases.ms.sum()
    st.altair_chart(alt.Chart(phases).mark_bar().encode(
        alt.X("ms:Q", stack="zero", title="mean ms per query"), alt.Color("phase:N", sort=["H2D", "compute", "D2H"]),
        order="order:Q", tooltip=["phase", alt.Tooltip("ms:Q", format=".4g"), alt.Tooltip("share:Q", format=".1%")],
    ).transform_calculate(order="indexof(['H2D','compute','D2H'], datum.phase)").properties(height=90),
        width="stretch")
    st.caption(" · ".join(f"{r.phase} {r.ms:.4g} ms ({r.share:.1%})" for r in phases.itertuples()))

st.subheader("Layers")
layers = snap.cell_file(cell_id, "layers")
if layers.empty:
    st.info("No per-layer rows for this cell.")
else:
    kinds = layer_kinds(layers, cell.backend)
    coverage = layer_coverage(snap, cell_id, layers)
    if kinds.nunique() > 1:  # never summed across kinds
        st.caption(f"{len(layers)} layers of kinds " + ", ".join(sorted(kinds.dropna().unique())) + ": "
                   + "; ".join(f"{k} {layers.time_avg_ms[kinds == k].sum():.4g} ms" for k in sorted(kinds.dropna().unique()))
                   + " summed per query in the profiling run (profiled apart from the timed loop).")
    else:
        total = layers.time_avg_ms.sum()
        coverage_text = f", {coverage:.0f} % of the compute time" if coverage is not None else ""
        st.caption(f"{len(layers)} layers ({kinds.iloc[0] or 'kind unknown'} rows), {total:.4g} ms summed per query "
                   f"in the profiling run{coverage_text} (profiled apart from the timed loop).")
    note = coverage_note(coverage)
    if note:
        st.warning(note)
    by_time, by_memory = st.tabs(["Top layers by time", "Top layers by memory"])
    with by_time:
        top = top_layers(layers, "time_avg_ms")
        st.altair_chart(alt.Chart(top).mark_bar().encode(
            alt.X("time_avg_ms:Q", title="mean ms"), alt.Y("name:N", sort="-x", title=None, axis=alt.Axis(labelOverlap=False, labelLimit=320)),
            tooltip=["name", "type", "time_avg_ms", "time_share_percent"]).properties(height=22 * len(top) + 40),
            width="stretch")
        st.dataframe(top, hide_index=True)
    with by_memory:
        top = top_layers(layers, "total_bytes")
        if top.empty:
            st.info("No layer has a known size (dynamic shapes).")
        else:
            st.altair_chart(alt.Chart(top.assign(MiB=top.total_bytes / 2**20)).mark_bar().encode(
                alt.X("MiB:Q", title="input + weights + output (MiB)"), alt.Y("name:N", sort="-x", title=None, axis=alt.Axis(labelOverlap=False, labelLimit=320)),
                tooltip=["name", "type", "input_bytes", "weight_bytes", "output_bytes"]
            ).properties(height=22 * len(top) + 40), width="stretch")
            st.dataframe(top, hide_index=True)
    downloads(layers, f"layers-{cell_id[:8]}", "cell-layers")

    st.subheader("Engine graph")
    if shutil.which("dot") is None:
        st.info("Drawing the graph needs graphviz's `dot` program (apt-get install graphviz).")
    elif len(layers) > GRAPH_LAYER_LIMIT and not st.button(f"Draw the graph of {len(layers)} layers"):
        st.caption(f"{len(layers)} layers: drawing takes a while, so it waits for the button.")
    else:
        from farm.layers.graph import render

        title = f"{cell.model} · {cell.precision} · batch {cell.batch} · {cell.backend} · cell {cell_id[:8]}"
        svg = render(graph_rows(layers), title, "svg")
        with st.container(height=600):
            st.image(svg.decode(), width="content")
        st.download_button("Graph (SVG)", svg, file_name=f"engine-{cell_id[:8]}.svg", mime="image/svg+xml",
                           icon=":material/download:", on_click="ignore")

st.subheader("Provenance")
row = snap.query("SELECT * FROM cells WHERE cell_id = ?", [cell_id]).iloc[0]
run = snap.query("SELECT command, host, executor, started_at FROM sweeps WHERE run_id = ?", [row.run_id])
build = snap.query("SELECT * FROM builds WHERE cell_id = ?", [cell_id])
device = snap.query("SELECT * FROM devices WHERE device_id = ?", [row.device_id])
facts = {
    "sweep": row.sweep_id, "run": row.run_id,
    "command": run.command.iloc[0] if len(run) else None,
    "sweep file hash": row.config_hash, "farm": f"{row.farm_version} ({row.farm_commit or 'not a checkout'})",
    "model": f"{row.model_source} · {human_bytes(row.model_bytes)} · sha256 {str(row.model_sha256)[:16]}…",
    "input shapes": row.shapes, "backend options": row.options, "profile": row.profile_ranges,
    "device": (f"{device.name.iloc[0]} ({device.kind.iloc[0]})" if len(device) else row.device_id),
    "host": " · ".join(str(v) for v in (row.host, row.cpu_model) if pd.notna(v) and v)
            + (f" · {row.cpu_cores} cores" if pd.notna(row.cpu_cores) else "") or None,
    "worker": row.worker,
    "started / finished (UTC)": (f"{row.started_at} / {row.finished_at} ({row.duration_s:.1f} s)"
                                 if pd.notna(row.duration_s) else None),
    "notes": row.notes,
}
if "ingested_on" in row and pd.notna(row.ingested_on):  # imported TensorRT output: where, not measured here
    facts["ingested on"] = row.ingested_on
    facts["farm"] = None
if len(build):
    b = build.iloc[0]
    facts["build"] = (f"{b.build_s:.3g} s, artifact {human_bytes(b.artifact_bytes)}, "
                      f"{b.layers_before_fusion} → {b.layers_after_fusion} layers")
    if pd.notna(b.precision_transform_s):
        facts["precision transform"] = (f"{b.precision_transform_s:.3g} s"
                                        + (" (cached)" if b.precision_transform_cached else ""))
    if b.calibration:
        facts["calibration"] = b.calibration
st.table(pd.DataFrame({"value": [str(v) if v is not None and not (isinstance(v, float) and pd.isna(v)) else "–"
                                  for v in facts.values()]},
                      index=pd.Index(list(facts), name="fact")))
with st.expander("Library versions"):
    st.json(json.loads(row.versions or "{}"))
if len(device):
    with st.expander("Device"):
        st.dataframe(device.T.rename(columns={0: "value"}).astype(str))
