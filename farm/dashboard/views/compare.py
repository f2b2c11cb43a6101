"""Compare: throughput and latency against batch size (colour by precision, dash and marker by
backend and mode, log or linear y), the Pareto frontier of throughput against p99 latency with
each point's batch size, energy per inference against throughput (GPU cells with telemetry), and a
table with confidence intervals, speedup over a baseline, peak memory and energy."""

import pandas as pd
import streamlit as st

from farm.compare.stats import RULE_TEXT, UNDECIDED
from farm.dashboard.common import compared_cells, downloads, latest_sweep, md, snapshot_or_stop
from farm.dashboard.data import filter_cells, measured_only, series_labels
from farm.dashboard.roofline import cell_roofline
from farm.dashboard.serving import draw_curves, server_tests
from farm.dashboard.summary import default_baseline, listed_backends, series_colours
from farm.dashboard.telemetry import energy_frame
from farm.measure import MIN_TAIL_SAMPLES

LATENCIES = {"p50 (median)": "latency_median_ms", "p90": "latency_p90_ms", "p95": "latency_p95_ms",
             "p99": "latency_p99_ms", "mean": "latency_mean_ms"}
THROUGHPUTS = {"samples/s": "throughput_samples_per_s", "queries/s": "throughput_qps"}
MAX_CHARTED_MODELS = 1  # more models: one at a time, picked (four charts a model: 1 s to draw on 2 cores)
MAX_CHARTED_SERIES = 24  # per model: more lines than this are unreadable (and slow to draw)
VERDICT_SHAPES = {"domain": ["pass", "fail", "unjudged", "not checked"],
                  "range": ["circle", "cross", "diamond", "square"]}
CLOCK_SHAPES = {"domain": ["not throttled", "throttled"], "range": ["circle", "cross"]}
LEGEND = {"orient": "right", "labelLimit": 0, "symbolLimit": 0}  # every entry, never cut short

snap = snapshot_or_stop()
st.title("Compare")
cells = snap.cell_frame

sweeps = sorted(cells.sweep_id.unique())
linked = [s for s in st.query_params.get_all("sweep") if s in sweeps]  # /compare?sweep=a&sweep=b
top = st.columns([3, 2, 1])
chosen = top[0].multiselect("Sweeps", sweeps, default=linked or [latest_sweep(cells)], key="cmp-sweeps")
frame = cells[cells.sweep_id.isin(chosen)]
batches = top[1].multiselect("Batch sizes", sorted(frame.batch.dropna().unique().tolist()), key="cmp-batches",
                             help="Only these batch sizes, in the charts and the table (none chosen: all).")
log_y = top[2].toggle("Log y-axis", value=True, key="cmp-logy", help="Throughput and latency on a log scale, "
                      "so that batch 1 is not squashed against the axis.")
frame = frame.assign(series=series_labels(frame))  # name only what varies within the sweeps chosen
with st.expander("Filters", expanded=False):
    left, middle, right = st.columns(3)
    models = left.multiselect("Models", sorted(frame.model.unique()), key="cmp-models")
    precisions = middle.multiselect("Precisions", sorted(frame.precision.unique()), key="cmp-precisions")
    backends = right.multiselect("Backends", sorted(frame.backend.unique()), key="cmp-backends")
    devices = left.multiselect("Devices", sorted(frame.device.dropna().unique()), key="cmp-devices")
    series_filter = middle.multiselect("Series", sorted(frame.series.unique()), key="cmp-series")
    stable_only = right.checkbox("Stable cells only", key="cmp-stable")
filters = {"model": models, "precision": precisions, "backend": backends, "device": devices,
           "series": series_filter, "batch": batches}
frame = filter_cells(frame, filters, stable_only)
measured = measured_only(frame)
served = server_tests(snap, frame)  # Server cells have LoadGen tests instead of a timing loop's figures
if measured.empty:
    if served.empty:
        st.warning("No measured (ok) cell matches: widen the filters or pick another sweep.")
    else:
        draw_curves(served, log_y)
    st.stop()

left, right = st.columns(2)
throughput_label = left.selectbox("Throughput", list(THROUGHPUTS), key="cmp-throughput")
latency_label = right.selectbox("Latency", list(LATENCIES), index=3, key="cmp-latency")
throughput, latency = THROUGHPUTS[throughput_label], LATENCIES[latency_label]

series_names = sorted(measured.series.unique())
default_base = default_baseline(measured, listed_backends(snap, chosen))
baseline = st.selectbox("Baseline for speedup", series_names, index=series_names.index(default_base),
                        key="cmp-baseline", help="Each cell is compared with this series' cell of the same model "
                                                 "and batch size. Default: fp32 on the first backend the sweep "
                                                 "lists, eager mode where it has modes.")
compared = compared_cells(snap, chosen, filters, stable_only, baseline, throughput)

colours = series_colours(compared)
# Vega-Lite specs written as dicts (Altair's objects cost 0.1 s a chart in validation alone: 12 charts a page).
SERIES_COLOR = {"field": "series", "type": "nominal", "title": "precision · backend",
                "scale": {"domain": list(colours), "range": list(colours.values())}, "legend": LEGEND}
STYLE_DASH = {"field": "style", "type": "nominal", "title": "backend, mode", "legend": LEGEND}
Y_SCALE = {"type": "log"} if log_y else {"zero": False}
BATCH_AXIS = {"field": "batch", "type": "quantitative", "title": "batch size", "scale": {"type": "log", "base": 2},
              "axis": {"values": sorted(int(b) for b in measured.batch.dropna().unique())}}


def field(name: str, kind: str = "quantitative", **more) -> dict:
    return {"field": name, "type": kind, **more}


TOOLTIP = [field("label", "nominal"), field("series", "nominal"), field("batch"),
           field(throughput, format=",.4g"), field(latency, format=".4g"), field("noise_low_ms", format=".4g"),
           field("noise_high_ms", format=".4g"), field("speedup", format=".3f"), field("vs_baseline", "nominal"),
           field("accuracy", "nominal"), field("peak memory", "nominal"), field("stable", "nominal")]


def chart(data: pd.DataFrame, layers: list[dict], legend_entries: int, legends: int, least: int = 320) -> None:
    """A chart tall enough for its legends (beside it, one above the other: a legend taller than the
    chart is cut off); drawn as SVG, so its text is text (a browser test reads the legend)."""
    height = max(least, 30 * legend_entries + 45 * legends + 20)  # Streamlit's theme: 30 px an entry
    st.vega_lite_chart(data, {"height": height, "layer": layers, "usermeta": {"embedOptions": {"renderer": "svg"}}},
                       width="stretch")


def against_batch(data: pd.DataFrame, name: str, title: str) -> None:
    layers = [{"mark": {"type": "line", "point": True}, "encoding": {
        "x": BATCH_AXIS, "y": field(name, title=title, scale=Y_SCALE), "color": SERIES_COLOR,
        "strokeDash": STYLE_DASH, "shape": {**STYLE_DASH, "legend": None}, "tooltip": TOOLTIP}}]
    if name == "latency_median_ms":  # the median has a confidence interval: draw it
        layers.append({"mark": "errorbar", "encoding": {"x": BATCH_AXIS, "color": SERIES_COLOR,
                                                        "y": field("noise_low_ms", title=title, scale=Y_SCALE),
                                                        "y2": {"field": "noise_high_ms"}}})
    chart(data, layers, data.series.nunique() + data["style"].nunique(), 2)


def pareto(rows: pd.DataFrame) -> None:
    x = field("latency_p99_ms", title="p99 latency (ms), lower is better", scale={"type": "log"})
    y = field(throughput, title=f"throughput ({throughput_label}), higher is better", scale=Y_SCALE)
    shape = field("accuracy", "nominal", title="accuracy", legend=LEGEND, scale=VERDICT_SHAPES)
    chart(rows, [
        {"mark": {"type": "line", "color": "#555", "strokeDash": [4, 3]}, "transform": [{"filter": "datum.pareto"}],
         "encoding": {"x": x, "y": y}},
        {"mark": {"type": "point", "filled": True, "size": 70},
         "encoding": {"x": x, "y": y, "color": SERIES_COLOR, "shape": shape, "tooltip": TOOLTIP}},
        # the batch on the frontier's points only: on all of them (18 series x 4 batches) the labels overlapped
        {"mark": {"type": "text", "align": "left", "dx": 6, "dy": -6, "fontSize": 10, "color": "#444"},
         "transform": [{"filter": "datum.pareto"}], "encoding": {"x": x, "y": y, "text": field("batch_label", "nominal")}},
    ], rows.series.nunique() + len(VERDICT_SHAPES["domain"]), 2, least=360)


def energy_chart(energy: pd.DataFrame) -> None:
    chart(energy, [{"mark": {"type": "point", "filled": True, "size": 70}, "encoding": {
        "x": field(throughput, title=f"throughput ({throughput_label}), higher is better"),
        "y": field("energy_per_query_mj", title="mJ per inference, lower is better", scale={"type": "log"}),
        "color": SERIES_COLOR, "shape": field("clocks", "nominal", title="clocks", scale=CLOCK_SHAPES),
        "tooltip": TOOLTIP + [field("energy_per_query_mj", format=".4g"), field("energy_per_sample_mj", format=".4g"),
                              field("power_mean_w", format=".4g"), field("throttle_reasons", "nominal")]}}],
          energy.series.nunique() + len(CLOCK_SHAPES["domain"]), 2)


def charted(rows: pd.DataFrame) -> pd.DataFrame:
    """The columns the charts use (a chart embeds its data: the rest would only slow the page), of
    at most MAX_CHARTED_SERIES series: those with the highest peak throughput."""
    kept = rows.groupby("series")[throughput].max().nlargest(MAX_CHARTED_SERIES).index
    used = ["label", "series", "style", "batch", "batch_label", throughput, latency, "latency_median_ms",
            "latency_p99_ms", "noise_low_ms", "noise_high_ms", "speedup", "vs_baseline", "accuracy",
            "peak memory", "stable", "pareto", "energy_per_query_mj", "energy_per_sample_mj", "power_mean_w",
            "throttled", "throttle_reasons"]
    return rows.loc[rows.series.isin(kept), list(dict.fromkeys(used))]


models = sorted(compared.model.unique())
charted_models = models
if len(models) > MAX_CHARTED_MODELS:  # each model is four charts: keep the page quick to draw
    charted_models = [st.selectbox("Charts of model", models, key="cmp-model",
                                   help="the charts show one model at a time; the table below has every cell")]
for model in charted_models:
    everything = compared[compared.model == model]
    rows = charted(everything)
    st.subheader(model)
    if rows.series.nunique() < everything.series.nunique():
        st.caption(f"The {MAX_CHARTED_SERIES} series of highest throughput of {everything.series.nunique()}: "
                   "pick series under Filters to chart others.")
    # Full width, one above the other: the legend needs the room beside the plot.
    against_batch(rows, throughput, f"throughput ({throughput_label})")
    against_batch(rows, latency, f"latency {latency_label} (ms)")

    front = rows[rows.pareto].sort_values("latency_p99_ms")
    st.markdown(f"**Pareto frontier** ({len(front)} of {len(rows)} cells on it, dashed, each labelled with its batch "
                "size): throughput against p99 latency; shape is the accuracy verdict against the fp32 reference.")
    pareto(rows)
    failing = front[front.accuracy == "fail"]
    if not failing.empty:
        st.warning(f"{len(failing)} cell(s) on the frontier fail the accuracy check: "
                   + "; ".join(md(label) for label in failing.label.head(5)))
    energy = energy_frame(rows)
    if not energy.empty:  # GPU cells with telemetry (farm.telemetry)
        st.markdown("**Energy per inference against throughput**: board energy over the timed window ÷ "
                    "inferences; a cross marks a cell whose GPU clocks were slowed (throttled) while it was timed.")
        energy_chart(energy)

if not served.empty:
    draw_curves(served, log_y)

st.subheader("Table")
noise = compared[compared.vs_baseline.isin(UNDECIDED)]
few_tail = compared.latency_p99_tail_samples.lt(MIN_TAIL_SAMPLES).fillna(False).astype(bool)
stored = compared[compared.noise_basis == "stored"]
st.caption(f"Speedup = throughput / the baseline's ({md(baseline)}) at the same model and batch. "
           f"vs baseline: {RULE_TEXT} ({len(noise)} cell(s) here show no change that matters, in grey); "
           "intervals from "
           "each cell's raw samples" + (f", except {len(stored)} cell(s) without samples, judged on their stored "
                                       "intervals (noise basis: stored)" if len(stored) else "")
           + ". stable = latency CV and repeat spread under their thresholds. "
           f"⚠ on p99: fewer than {MIN_TAIL_SAMPLES} samples above it ({int(few_tail.sum())} cell(s)).")


def _interval(low: float, high: float, digits: str = ".4g") -> str:
    return f"{low:{digits}} – {high:{digits}}" if pd.notna(low) and pd.notna(high) else ""


ROOFLINE = ["achieved_tflops", "pct_peak_compute", "achieved_gbps", "pct_peak_bandwidth", "bound"]
# Off by default: counting FLOPs reads (or, for zoo models, regenerates) every model of the table:
# seconds on the first use in a dashboard process, where the rest of the page takes a fraction of one.
if st.toggle("Roofline columns", key="roofline", help="achieved TFLOP/s and GB/s, % of the device's peaks and the "
             "bounding roof per cell, from FLOPs and bytes counted in the ONNX graph (docs/dashboard.md, Roofline); "
             "counting takes seconds the first time"):
    compared = compared.merge(cell_roofline(snap, compared.cell_id)[["cell_id", *ROOFLINE]], on="cell_id", how="left")
else:
    compared = compared.assign(**{column: None for column in ROOFLINE})
table = compared.assign(
    ci=[_interval(lo, hi) for lo, hi in zip(compared.noise_low_ms, compared.noise_high_ms)],
    ratio_ci=[_interval(lo, hi, ".3f") for lo, hi in zip(compared.ratio_low, compared.ratio_high)],
    p99=[f"{v:.4g}" + (" ⚠" if few else "") if pd.notna(v) else "" for v, few in zip(compared.latency_p99_ms,
                                                                                    few_tail)],
    link="cell?cell=" + compared.cell_id)
table = table[["link", "model", "series", "batch", "throughput_qps", "throughput_samples_per_s",
               "latency_median_ms", "ci", "p99", "latency_p99_tail_samples", "latency_cv_percent", "stable",
               "peak_memory_mib", "achieved_tflops", "pct_peak_compute", "pct_peak_bandwidth", "bound",
               "speedup", "latency_ratio", "ratio_ci", "vs_baseline", "timing_differs", "noise_basis", "accuracy",
               "failed_metric", "energy_per_query_mj", "energy_per_sample_mj", "power_mean_w", "throttle_reasons",
               "pareto", "cell_id"]]


def _mark_noise(row: pd.Series) -> list[str]:
    style = "color: #888; font-style: italic" if row.vs_baseline in UNDECIDED else ""
    return [style if column in ("speedup", "latency_ratio", "vs_baseline") else "" for column in row.index]


styled = table.style.apply(_mark_noise, axis=1) if len(table) <= 2000 else table
st.dataframe(styled, hide_index=True, column_config={
    "link": st.column_config.LinkColumn("cell", display_text=r"cell=(\w{8})"),
    "throughput_qps": st.column_config.NumberColumn("qps", format="%.4g"),
    "throughput_samples_per_s": st.column_config.NumberColumn("samples/s", format="%.4g"),
    "latency_median_ms": st.column_config.NumberColumn("p50 ms", format="%.4g"),
    "ci": st.column_config.TextColumn("p50 95% CI ms"),
    "p99": st.column_config.TextColumn("p99 ms", help=f"⚠: fewer than {MIN_TAIL_SAMPLES} samples above it"),
    "latency_p99_tail_samples": st.column_config.NumberColumn("queries > p99", format="%d"),
    "latency_ratio": st.column_config.NumberColumn("p50 / baseline", format="%.3f"),
    "ratio_ci": st.column_config.TextColumn("ratio 95% CI"),
    "noise_basis": st.column_config.TextColumn("noise basis"),
    "latency_cv_percent": st.column_config.NumberColumn("CV %", format="%.2f"),
    "achieved_tflops": st.column_config.NumberColumn("TFLOP/s", format="%.4g",
                                                     help="FLOPs from the ONNX graph over the compute time"),
    "pct_peak_compute": st.column_config.NumberColumn("% peak compute", format="%.3g",
                                                      help="of the GPU's datasheet peak at the cell's precision"),
    "pct_peak_bandwidth": st.column_config.NumberColumn("% peak bandwidth", format="%.3g",
                                                        help="unfused bytes over the compute time, of the datasheet's"),
    "bound": st.column_config.TextColumn("roofline bound", help="compute or memory: docs/dashboard.md, Roofline"),
    "peak_memory_mib": st.column_config.NumberColumn("peak memory MiB", format="%.1f",
                                                     help="peak device memory while timed, in MiB (2^20 bytes)"),
    "speedup": st.column_config.NumberColumn("speedup", format="%.3f×"),
    "vs_baseline": st.column_config.TextColumn("vs baseline"),
    "timing_differs": st.column_config.TextColumn("timed differently", help="what one latency includes and the "
                                                  "baseline's does not (transfers, CUDA graph, spin-wait, streams)"),
    "failed_metric": st.column_config.TextColumn("failed metric"),
    "energy_per_query_mj": st.column_config.NumberColumn("mJ / inference", format="%.4g"),
    "energy_per_sample_mj": st.column_config.NumberColumn("mJ / sample", format="%.4g"),
    "power_mean_w": st.column_config.NumberColumn("mean W", format="%.4g"),
    "throttle_reasons": st.column_config.TextColumn("throttled by", help="GPU clock-event reasons seen while timed"),
    "pareto": st.column_config.CheckboxColumn("on frontier"),
})
downloads(table.drop(columns="link").assign(p99=compared.latency_p99_ms), "compare", "compare-table")
not_ok = frame[(frame.status != "ok") | frame.throughput_qps.isna()]
if not not_ok.empty:
    kinds = not_ok.status.where(not_ok.status != "ok", "ingested without timing")
    st.caption(f"{len(not_ok)} cell(s) of this selection have no measurement: "
               + ", ".join(f"{n} {s}" for s, n in kinds.value_counts().items()) + " (see Overview).")
