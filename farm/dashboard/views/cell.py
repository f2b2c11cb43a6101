"""Cell: one cell's latency distribution, its GPU telemetry (energy, power, clocks, throttling),
H2D / compute / D2H split, its roofline, the engine explorer's layer views (time by layer type,
top layers by time and memory, memory and precision per layer, roofline per layer), its engine
graph (or, where the rows name no tensors, a searchable list), and where the figures came from."""

import json
import shutil

import altair as alt
import pandas as pd
import streamlit as st

from farm.dashboard.common import cell_picker, downloads, human_bytes, md, snapshot_or_stop, text_table
from farm.dashboard.data import number
from farm.dashboard.layer_tables import (
    default_cell,
    graph_rows,
    has_layer_edges,
    layer_coverage,
    layer_kinds,
    layer_list,
    memory_table,
    precision_table,
    time_by_type,
    top_layers,
)
from farm.dashboard.roofline import NoModel, cell_roofline, layer_roofline
from farm.dashboard.telemetry import has_telemetry, telemetry_caption, telemetry_metrics, throttle_warning
from farm.layers.coverage import coverage_note

GRAPH_LAYER_LIMIT = 400  # larger graphs take graphviz seconds to minutes: drawn on request

MIB = {f"{part}_mib": st.column_config.NumberColumn(f"{part} (MiB)", format="%.3f MiB")
       for part in ("input", "weight", "output", "total")}


def memory_tab(layers: pd.DataFrame) -> None:
    memory = memory_table(layers)
    if memory.empty:
        st.info("No layer has a known size (dynamic shapes, or rows that name no tensors).")
        return
    known = layers.dropna(subset=["total_bytes"])
    columns = st.columns(4)
    columns[0].metric("Weights", human_bytes(known.weight_bytes.sum()))
    columns[1].metric("Activations read", human_bytes(known.input_bytes.sum()))
    columns[2].metric("Activations written", human_bytes(known.output_bytes.sum()))
    columns[3].metric("Largest layer", human_bytes(known.total_bytes.max()))
    st.caption(f"{len(memory)} of {len(layers)} layers have a known size: input + weights + output, by the "
               "engine explorer's rule (docs/dashboard.md). Sort by a column; search with the table's toolbar.")
    st.dataframe(memory, hide_index=True, column_config=MIB)


def precision_tab(layers: pd.DataFrame) -> None:
    per_layer, summary = precision_table(layers)
    if per_layer.empty:
        st.info("These rows carry no precision (torch.compile's kernels, rows a profile named only).")
        return
    st.caption(f"{len(per_layer)} of {len(layers)} layers carry their output's type; the time shares are of "
               "those layers' time.")
    st.caption("; ".join(f"{r.precision}: {r.layers} layers, {r.share_percent:.1f} % of the time"
                         for r in summary.itertuples()))
    left, right = st.columns([1, 2])
    left.dataframe(summary, hide_index=True, column_config={
        "time_ms": st.column_config.NumberColumn("Σ ms", format="%.4g"),
        "share_percent": st.column_config.NumberColumn("share", format="%.1f %%")})
    right.altair_chart(alt.Chart(summary).mark_arc().encode(
        theta="time_ms:Q", color=alt.Color("precision:N"),
        tooltip=["precision", "layers", alt.Tooltip("share_percent:Q", format=".1f")]).properties(height=220),
        width="stretch")
    st.dataframe(per_layer, hide_index=True)


def roofline_tab(layers: pd.DataFrame) -> None:
    try:
        per_layer = layer_roofline(snap, cell_id, layers)
    except NoModel as exc:
        st.info(f"No per-layer roofline: {md(exc)}.")
        return
    mapped = per_layer[per_layer.mapped != "no"]
    st.caption(f"{len(mapped)} of {len(per_layer)} layers map to ONNX nodes (graph ops by node name, TensorRT "
               "layers through their fused names); the others are unmapped (kernels a compiler generated, nodes "
               "an optimizer fused or added, reformatting layers).")
    if not mapped.empty and mapped.achieved_tflops.notna().any():
        st.altair_chart(alt.Chart(mapped.dropna(subset=["achieved_tflops", "intensity"])).mark_circle(size=60).encode(
            alt.X("intensity:Q", scale=alt.Scale(type="log"), title="arithmetic intensity (FLOP/byte)"),
            alt.Y("achieved_tflops:Q", scale=alt.Scale(type="log"), title="achieved TFLOP/s"),
            color=alt.Color("bound:N"), tooltip=["name", "type", "flops", "achieved_tflops", "pct_peak_compute",
                                                 "pct_peak_bandwidth"]).properties(height=300), width="stretch")
    st.dataframe(per_layer, hide_index=True, column_config={
        "achieved_tflops": st.column_config.NumberColumn("TFLOP/s", format="%.4g"),
        "pct_peak_compute": st.column_config.NumberColumn("% peak compute", format="%.3g"),
        "achieved_gbps": st.column_config.NumberColumn("GB/s", format="%.4g"),
        "pct_peak_bandwidth": st.column_config.NumberColumn("% peak bandwidth", format="%.3g"),
        "intensity": st.column_config.NumberColumn("FLOP/byte", format="%.4g")})


def graph_section(layers: pd.DataFrame) -> None:
    st.subheader("Engine graph")
    if shutil.which("dot") is None:
        st.info("Drawing the graph needs graphviz's `dot` program (apt-get install graphviz).")
    elif len(layers) > GRAPH_LAYER_LIMIT and not st.button(f"Draw the graph of {len(layers)} layers"):
        st.caption(f"{len(layers)} layers: drawing takes a while, so it waits for the button.")
    else:
        from farm.layers.graph import render

        title = f"{cell.model} · {cell.precision} · batch {cell.batch} · {cell.backend} · cell {cell_id[:8]}"
        svg = render(graph_rows(layers), title, "svg")
        st.caption("Ranked top to bottom along the tensors; layers shaded by their share of the time.")
        with st.container(height=600):
            st.image(svg.decode(), width="content")
        st.download_button("Graph (SVG)", svg, file_name=f"engine-{cell_id[:8]}.svg", mime="image/svg+xml", on_click="ignore")


def list_section(layers: pd.DataFrame) -> None:
    st.subheader("Layers in execution order")
    st.caption(f"These {len(layers)} rows name no tensors (a compiler's kernels, or rows a profile named only), so "
               "no edges are known and no graph is drawn: search by name or type, sort by a column.")
    search = st.text_input("Search layers", key="layer-search", placeholder="name or type contains…")
    found = layer_list(layers, search)
    st.caption(f"{len(found)} of {len(layers)} layers" + (f" match “{search}”" if search else ""))
    st.dataframe(found, hide_index=True, column_config={
        "time_avg_ms": st.column_config.NumberColumn("mean ms", format="%.4g"),
        "time_share_percent": st.column_config.NumberColumn("time share", format="%.2f %%"),
        "total_mib": st.column_config.NumberColumn("memory", format="%.3f MiB")}, key="layer-list")


snap = snapshot_or_stop()
st.title("Cell")
cell_id = cell_picker(snap, "Cell", "cell", default=default_cell(snap))  # a cell whose graph is a graph
cell = snap.cell(cell_id)
st.caption(f"`{cell_id}`")
if cell.status != "ok":
    st.error(f"**{cell.status}**: {md(cell.reason or 'no reason recorded')}")
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
    verdict = ("fail" if (accuracy.verdict == "fail").any() else "pass" if (accuracy.verdict == "pass").all()
               else "unjudged")
    {"pass": st.success, "fail": st.error, "unjudged": st.warning}[verdict](
        f"Accuracy against the fp32 reference: **{verdict}** (worst: "
        + ", ".join(f"{r.output_name} {r.worst_metric}" + ("" if pd.isna(r.worst_value) else f" {r.worst_value:.6g}")
                    for r in accuracy.itertuples()) + ")")

if has_telemetry(cell):
    st.subheader("GPU telemetry")
    metrics = telemetry_metrics(cell)
    for start in range(0, len(metrics), 4):  # rows of four: seven in a row clipped their values at 1600 px
        for column, (label, value, help_text) in zip(st.columns(4), metrics[start:start + 4]):
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
if phases.empty:
    st.caption("No H2D / compute / D2H split recorded for this cell.")
elif len(phases) == 1 and phases.phase.iloc[0] == "compute":
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

st.subheader("Roofline")
roof = cell_roofline(snap, [cell_id]).iloc[0]
if pd.isna(roof.flops):
    st.info(f"No roofline: {md(roof.note)}.")
else:
    columns = st.columns(4)
    columns[0].metric("GFLOP per query", f"{roof.flops / 1e9:.4g}", help="from the ONNX graph at this cell's shapes")
    columns[1].metric("MiB moved per query", f"{roof.bytes / 2**20:.4g}",
                      help="weights + each node's inputs and outputs at the cell's precision, unfused")
    columns[2].metric("FLOP per byte", f"{roof.intensity:.4g}", help="arithmetic intensity")
    columns[3].metric("Bound by", roof.bound or "–", help="the roof under which the intensity puts the cell")
    columns = st.columns(4)
    columns[0].metric("Achieved TFLOP/s", number(roof.achieved_tflops))
    columns[1].metric("% of peak compute",
                      "–" if pd.isna(roof.pct_peak_compute) else f"{roof.pct_peak_compute:.3g} %")
    columns[2].metric("Achieved GB/s", number(roof.achieved_gbps))
    columns[3].metric("% of peak bandwidth",
                      "–" if pd.isna(roof.pct_peak_bandwidth) else f"{roof.pct_peak_bandwidth:.3g} %")
    peak_text = (f"against the {roof.peak}'s datasheet peaks at {cell.precision}" if roof.peak
                 else "no peak to set them against")
    st.caption(f"{roof.flops / 1e9:.4g} GFLOP and {human_bytes(roof.bytes)} per query in {roof.time_ms:.4g} ms "
               f"(compute time), arithmetic intensity {roof.intensity:.4g} FLOP/byte, {peak_text}"
               + (f"; {roof.note}" if isinstance(roof.note, str) else "") + ". Method: docs/dashboard.md, Roofline.")

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
    views = ["Top layers by time", "Time by layer type", "Top layers by memory", "Memory per layer",
             "Precision per layer", "Roofline per layer"]
    view = st.segmented_control("Layer view", views, default=views[0], key="layer-view") or views[0]
    if view == views[0]:
        top = top_layers(layers, "time_avg_ms")
        st.altair_chart(alt.Chart(top).mark_bar().encode(
            alt.X("time_avg_ms:Q", title="mean ms"),
            alt.Y("name:N", sort="-x", title=None, axis=alt.Axis(labelOverlap=False, labelLimit=320)),
            tooltip=["name", "type", "time_avg_ms", "time_share_percent"]).properties(height=22 * len(top) + 40),
            width="stretch")
        st.dataframe(top[["layer_index", "name", "type", "time_avg_ms", "time_share_percent", "tactic"]],
                     hide_index=True, column_config={
                         "time_avg_ms": st.column_config.NumberColumn("mean ms", format="%.4g"),
                         "time_share_percent": st.column_config.NumberColumn("time share", format="%.2f %%")})
    if view == views[1]:
        by_type = time_by_type(layers, kinds)
        st.altair_chart(alt.Chart(by_type).mark_bar().encode(
            alt.X("share_percent:Q", title="% of the layer time (of its kind)"),
            alt.Y("type:N", sort="-x", title=None, axis=alt.Axis(labelLimit=320)), color=alt.Color("kind:N"),
            tooltip=["kind", "type", "layers", alt.Tooltip("time_ms:Q", format=".4g"),
                     alt.Tooltip("share_percent:Q", format=".1f")]).properties(height=22 * len(by_type) + 40),
            width="stretch")
        st.caption(" · ".join(f"{r.type} {r.share_percent:.1f} % ({r.layers} layers, {r.time_ms:.4g} ms)"
                              for r in by_type.groupby("kind").head(5).itertuples()) + " of the layer time of "
                   + " and ".join(sorted(by_type.kind.unique())) + " rows")
        st.dataframe(by_type, hide_index=True, column_config={
            "time_ms": st.column_config.NumberColumn("Σ ms", format="%.4g"),
            "share_percent": st.column_config.NumberColumn("share", format="%.1f %%")})
    if view == views[2]:
        top = top_layers(layers, "total_bytes")
        if top.empty:
            st.info("No layer has a known size (dynamic shapes, or rows that name no tensors).")
        else:
            st.altair_chart(alt.Chart(top.assign(MiB=top.total_bytes / 2**20)).mark_bar().encode(
                alt.X("MiB:Q", title="input + weights + output (MiB)"),
                alt.Y("name:N", sort="-x", title=None, axis=alt.Axis(labelOverlap=False, labelLimit=320)),
                tooltip=["name", "type", "input_bytes", "weight_bytes", "output_bytes"]
            ).properties(height=22 * len(top) + 40), width="stretch")
            st.dataframe(memory_table(layers).head(len(top)), hide_index=True, column_config=MIB)
    if view == views[3]:
        memory_tab(layers)
    if view == views[4]:
        precision_tab(layers)
    if view == views[5]:
        roofline_tab(layers)
    downloads(layers, f"layers-{cell_id[:8]}", "cell-layers")

    if has_layer_edges(layers):
        graph_section(layers)
    else:
        list_section(layers)

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
    if "provider_nodes" in b and pd.notna(b.provider_nodes):  # ONNX Runtime: where its nodes ran
        facts["nodes per provider"] = b.provider_nodes
        if pd.notna(b.cpu_provider_nodes) and b.cpu_provider_nodes:
            facts["on the CPU provider"] = (f"{b.cpu_provider_ops}" + (f" ({b.cpu_provider_node_ms:.3g} ms a run)"
                                            if pd.notna(b.cpu_provider_node_ms) else ""))
# text_table: st.table reads its cells as Markdown (`farm/__main__.py` came out bold, and a value
# could link or fetch an image); escaped, they are the text they are
text_table(pd.DataFrame({"value": [str(v) if v is not None and not (isinstance(v, float) and pd.isna(v)) else "–"
                                    for v in facts.values()]},
                        index=pd.Index(list(facts), name="fact")))
if len(build) and "transform_layers" in build and pd.notna(build.iloc[0].transform_layers):
    # PyTorch int8/fp8: which layers torchao quantized and which stayed in the compute dtype
    by_layer = pd.DataFrame(json.loads(build.iloc[0].transform_layers)).set_index("layer")
    counts = by_layer["precision"].value_counts()
    with st.expander("Precision by layer: " + ", ".join(f"{n} {p}" for p, n in counts.items())):
        text_table(by_layer)
with st.expander("Library versions"):
    st.json(json.loads(row.versions or "{}"))
if len(device):
    with st.expander("Device"):
        st.dataframe(device.T.rename(columns={0: "value"}).astype(str))
