"""Compare: throughput and latency against batch size, the Pareto frontier of throughput
against p99 latency, energy per inference against throughput (GPU cells with telemetry), and a
table with confidence intervals, speedup over a baseline and energy."""

import altair as alt
import pandas as pd
import streamlit as st

from farm.dashboard.common import downloads, snapshot_or_stop
from farm.dashboard.data import pareto_front, series_labels, with_noise_intervals, with_speedup
from farm.dashboard.noise import MIN_EFFECT_PERCENT
from farm.dashboard.telemetry import energy_frame
from farm.measure import MIN_TAIL_SAMPLES

LATENCIES = {"p50 (median)": "latency_median_ms", "p90": "latency_p90_ms", "p95": "latency_p95_ms",
             "p99": "latency_p99_ms", "mean": "latency_mean_ms"}
THROUGHPUTS = {"samples/s": "throughput_samples_per_s", "queries/s": "throughput_qps"}
MAX_CHARTED_MODELS = 4
SERIES_COLOR = alt.Color("series:N", scale=alt.Scale(scheme="tableau20"),
                         legend=alt.Legend(orient="right", labelLimit=360, symbolLimit=0))
VERDICT_SHAPES = alt.Scale(domain=["pass", "fail", "not checked"], range=["circle", "cross", "square"])
CLOCK_SHAPES = alt.Scale(domain=["not throttled", "throttled"], range=["circle", "cross"])

snap = snapshot_or_stop()
st.title("Compare")
cells = snap.cell_frame

sweeps = sorted(cells.sweep_id.unique())
linked = [s for s in st.query_params.get_all("sweep") if s in sweeps]  # /compare?sweep=a&sweep=b
latest = cells.sort_values("finished_at", na_position="first").sweep_id.iloc[-1]  # the newest measured
chosen = st.multiselect("Sweeps", sweeps, default=linked or [latest], key="cmp-sweeps")
frame = cells[cells.sweep_id.isin(chosen)].copy()
frame["series"] = series_labels(frame)  # name only what varies within the sweeps chosen
with st.expander("Filters", expanded=False):
    left, middle, right = st.columns(3)
    models = left.multiselect("Models", sorted(frame.model.unique()), key="cmp-models")
    precisions = middle.multiselect("Precisions", sorted(frame.precision.unique()), key="cmp-precisions")
    backends = right.multiselect("Backends", sorted(frame.backend.unique()), key="cmp-backends")
    devices = left.multiselect("Devices", sorted(frame.device.dropna().unique()), key="cmp-devices")
    series_filter = middle.multiselect("Series", sorted(frame.series.unique()), key="cmp-series")
    stable_only = right.checkbox("Stable cells only", key="cmp-stable")
for column, values in (("model", models), ("precision", precisions), ("backend", backends), ("device", devices),
                       ("series", series_filter)):
    if values:
        frame = frame[frame[column].isin(values)]
if stable_only:
    frame = frame[frame.stable.fillna(False).astype(bool)]
measured = frame[(frame.status == "ok") & frame.throughput_qps.notna()].copy()
if measured.empty:
    st.warning("No measured (ok) cell matches: widen the filters or pick another sweep.")
    st.stop()
measured["accuracy"] = measured.verdict.fillna("not checked")
measured = with_noise_intervals(snap, measured)  # the medians' intervals from each cell's raw samples

left, right = st.columns(2)
throughput_label = left.selectbox("Throughput", list(THROUGHPUTS), key="cmp-throughput")
latency_label = right.selectbox("Latency", list(LATENCIES), index=3, key="cmp-latency")
throughput, latency = THROUGHPUTS[throughput_label], LATENCIES[latency_label]

series_names = sorted(measured.series.unique())
default_base = next((s for s in series_names if s.startswith("fp32")), series_names[0])
baseline = st.selectbox("Baseline for speedup", series_names, index=series_names.index(default_base),
                        key="cmp-baseline", help="Each cell is compared with this series' cell of the same model "
                                                 "and batch size.")
compared = with_speedup(measured, baseline)
compared["pareto"] = pareto_front(compared, x="latency_p99_ms", y=throughput)

tooltip = ["label", "series", "batch", alt.Tooltip(throughput, format=",.4g"), alt.Tooltip(latency, format=".4g"),
           alt.Tooltip("noise_low_ms", format=".4g"), alt.Tooltip("noise_high_ms", format=".4g"),
           alt.Tooltip("speedup", format=".3f"), "vs_baseline", "accuracy", "stable"]
batch_axis = alt.X("batch:Q", scale=alt.Scale(type="log", base=2),
                   axis=alt.Axis(title="batch size", values=sorted(int(b) for b in measured.batch.dropna().unique())))


def against_batch(data: pd.DataFrame, field: str, title: str) -> alt.Chart:
    base = alt.Chart(data).encode(batch_axis, color=SERIES_COLOR)
    lines = base.mark_line(point=True).encode(alt.Y(f"{field}:Q", title=title), tooltip=tooltip)
    if field == "latency_median_ms":  # the median has a confidence interval: draw it
        lines += base.mark_errorbar().encode(alt.Y("noise_low_ms:Q", title=title), alt.Y2("noise_high_ms"))
    return lines.properties(height=max(320, 21 * data.series.nunique()))  # room for every legend entry


chart_data = compared.drop(columns=["finished_at"])
models = sorted(compared.model.unique())
if len(models) > MAX_CHARTED_MODELS:  # each model is three charts: keep the page quick to draw
    st.caption(f"Charts for the first {MAX_CHARTED_MODELS} of {len(models)} models; pick models under Filters to "
               "chart others. The table below has every cell.")
for model in models[:MAX_CHARTED_MODELS]:
    rows = chart_data[chart_data.model == model]
    st.subheader(model)
    # Full width, one above the other: the legend needs the room beside the plot.
    st.altair_chart(against_batch(rows, throughput, f"throughput ({throughput_label})"), width="stretch")
    st.altair_chart(against_batch(rows, latency, f"latency {latency_label} (ms)"), width="stretch")

    front = rows[rows.pareto].sort_values("latency_p99_ms")
    points = alt.Chart(rows).mark_point(filled=True, size=70).encode(
        alt.X("latency_p99_ms:Q", scale=alt.Scale(type="log"), title="p99 latency (ms), lower is better"),
        alt.Y(f"{throughput}:Q", title=f"throughput ({throughput_label}), higher is better"),
        color=SERIES_COLOR, shape=alt.Shape("accuracy:N", scale=VERDICT_SHAPES,
                                                                  title="accuracy"),
        tooltip=tooltip)
    line = alt.Chart(front).mark_line(color="#555", strokeDash=[4, 3]).encode(
        alt.X("latency_p99_ms:Q"), alt.Y(f"{throughput}:Q"))
    st.markdown(f"**Pareto frontier** ({len(front)} of {len(rows)} cells on it, dashed): throughput against p99 "
                "latency; shape is the accuracy verdict against the fp32 reference.")
    st.altair_chart((line + points).properties(height=max(360, 21 * rows.series.nunique() + 60)), width="stretch")
    failing = front[front.accuracy == "fail"]
    if not failing.empty:
        st.warning(f"{len(failing)} cell(s) on the frontier fail the accuracy check: "
                   + "; ".join(failing.label.head(5)))
    energy = energy_frame(rows)
    if not energy.empty:  # GPU cells with telemetry (farm.telemetry)
        st.markdown("**Energy per inference against throughput**: board energy over the timed window ÷ "
                    "inferences; a cross marks a cell whose GPU clocks were slowed (throttled) while it was timed.")
        st.altair_chart(alt.Chart(energy).mark_point(filled=True, size=70).encode(
            alt.X(f"{throughput}:Q", title=f"throughput ({throughput_label}), higher is better"),
            alt.Y("energy_per_query_mj:Q", scale=alt.Scale(type="log"), title="mJ per inference, lower is better"),
            color=SERIES_COLOR, shape=alt.Shape("clocks:N", scale=CLOCK_SHAPES, title="clocks"),
            tooltip=tooltip + [alt.Tooltip("energy_per_query_mj", format=".4g"),
                               alt.Tooltip("energy_per_sample_mj", format=".4g"),
                               alt.Tooltip("power_mean_w", format=".4g"), "throttle_reasons"],
        ).properties(height=max(320, 21 * energy.series.nunique())), width="stretch")

st.subheader("Table")
noise = compared[compared.vs_baseline == "within noise"]
few_tail = compared.latency_p99_tail_samples.lt(MIN_TAIL_SAMPLES).fillna(False).astype(bool)
stored = compared[compared.noise_basis == "stored"]
st.caption(f"Speedup = throughput / the baseline's ({baseline}) at the same model and batch. "
           "**within noise**: the 95 % interval of the ratio of the two median latencies includes 1, or the "
           f"ratio is less than {MIN_EFFECT_PERCENT:g} % from 1 ({len(noise)} such cell(s) here); intervals from "
           "each cell's raw samples" + (f", except {len(stored)} cell(s) without samples, judged on their stored "
                                       "intervals (noise basis: stored)" if len(stored) else "")
           + ". stable = latency CV and repeat spread under their thresholds. "
           f"⚠ on p99: fewer than {MIN_TAIL_SAMPLES} samples above it ({int(few_tail.sum())} cell(s)).")


def _interval(low: float, high: float, digits: str = ".4g") -> str:
    return f"{low:{digits}} – {high:{digits}}" if pd.notna(low) and pd.notna(high) else ""


table = compared.assign(
    ci=[_interval(lo, hi) for lo, hi in zip(compared.noise_low_ms, compared.noise_high_ms)],
    ratio_ci=[_interval(lo, hi, ".3f") for lo, hi in zip(compared.ratio_low, compared.ratio_high)],
    p99=[f"{v:.4g}" + (" ⚠" if few else "") if pd.notna(v) else "" for v, few in zip(compared.latency_p99_ms,
                                                                                    few_tail)],
    link="cell?cell=" + compared.cell_id)
table = table[["link", "model", "series", "batch", "throughput_qps", "throughput_samples_per_s",
               "latency_median_ms", "ci", "p99", "latency_p99_tail_samples", "latency_cv_percent", "stable",
               "speedup", "latency_ratio", "ratio_ci", "vs_baseline", "timing_differs", "noise_basis", "accuracy",
               "failed_metric", "energy_per_query_mj", "energy_per_sample_mj", "power_mean_w", "throttle_reasons",
               "pareto", "cell_id"]]


def _mark_noise(row: pd.Series) -> list[str]:
    style = "color: #888; font-style: italic" if row.vs_baseline == "within noise" else ""
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
