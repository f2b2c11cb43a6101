"""`farm report SWEEP -o report.html`: the dashboard's comparisons as one static HTML file.

Self-contained: styles inline, charts as inline SVG drawn by matplotlib (text as paths), no
script and no link to anything outside the file, so it survives mail, pull requests and
air-gapped machines. Figures come from the same functions as the dashboard (data.py).
"""

from __future__ import annotations

import datetime as dt
import html
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from farm.compare.stats import RULE_TEXT, UNDECIDED
from farm.dashboard.data import Snapshot, number, pareto_front, series_labels, with_noise_intervals, with_speedup
from farm.dashboard.layer_tables import layer_coverage, layer_kinds, top_layers
from farm.dashboard.summary import default_baseline, listed_backends, series_colours, summary, summary_text
from farm.layers.coverage import coverage_note
from farm.layers.memory import format_bytes
from farm.measure import MIN_TAIL_SAMPLES
from farm.warehouse import write_file

STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1200px;
       color: #222; padding: 0 1em; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 13px; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: right; }
th { background: #f4f4f4; } td.text, th.text { text-align: left; }
.noise { color: #888; font-style: italic; } .fail { color: #c62828; font-weight: 600; } .pass { color: #2e7d32; }
.meta { color: #555; font-size: 14px; } pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 12px; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; } .charts svg { max-width: 100%; height: auto; }
"""


def write_report(results: str | Path, sweep: str, output: Path, baseline: str | None = None,
                 against: str | None = None, base_results: str | Path | None = None) -> str:
    """Write the report of one sweep (with `against`: a "Changes against BASE" section, `farm
    compare BASE SWEEP`); returns a one-line summary of what it holds."""
    changes = _changes(results, sweep, against, base_results) if against is not None else ""
    snap = Snapshot(results)
    frame = snap.cell_frame[snap.cell_frame.sweep_id == sweep].copy()
    frame["series"] = series_labels(frame)  # labels within this sweep only
    measured = frame[(frame.status == "ok") & frame.throughput_qps.notna()].copy()  # ingested profiles: no timing
    names = sorted(measured.series.unique())
    if baseline is not None and baseline not in names:
        from farm.errors import UserError

        raise UserError(f"--baseline {baseline!r} is not a series of sweep {sweep}; series: {', '.join(names)}")
    baseline = baseline or default_baseline(measured, listed_backends(snap, [sweep]))
    measured = with_noise_intervals(snap, measured)  # the medians' intervals from each cell's raw samples
    compared = with_speedup(measured, baseline)
    compared["accuracy"] = compared.verdict.fillna("not checked")
    compared["pareto"] = pareto_front(compared)
    compared["colour"] = compared.series.map(series_colours(compared))
    compared["style"] = [s[len(p) + 3:] or p for s, p in zip(compared.series, compared.precision.astype(str))]
    parts = [_header(snap, sweep, frame), _answers(snap, frame, baseline), _serving(snap, sweep), changes]
    if compared.empty:
        parts.append("<p>No measured cell in this sweep.</p>")
    for model in sorted(compared.model.unique()):
        rows = compared[compared.model == model]
        parts.append(f"<h2>{_e(model)}</h2>")
        parts.append('<div class="charts">' + _chart_against_batch(rows, "throughput_samples_per_s",
                                                                   "throughput (samples/s)")
                     + _chart_against_batch(rows, "latency_p99_ms", "p99 latency (ms)") + "</div>")
        plotted = rows.dropna(subset=["latency_p99_ms", "throughput_samples_per_s"])
        if len(plotted):
            parts.append(f"<h3>Pareto frontier: throughput against p99 latency</h3><p class=meta>"
                         f"{int(plotted.pareto.sum())} of {len(plotted)} cells are on it (joined by the dashed line); "
                         "marker: o pass, x fail, d unjudged, s accuracy not checked.</p>" + _chart_pareto(plotted))
        parts.append(f"<h3>Cells</h3><p class=meta>Speedup = throughput over the baseline <b>{_e(baseline)}</b> at "
                     f"the same batch size; grey: no change that matters shown ({_e(RULE_TEXT)}). "
                     "Median intervals from each cell's raw samples"
                     + (" (cells without samples: their stored intervals, noise basis <i>stored</i>)"
                        if (rows.noise_source == "stored").any() else "")
                     + f". ⚠ on p99: fewer than {MIN_TAIL_SAMPLES} samples above it.</p>" + _cell_table(rows))
        parts.append(_top_layers(snap, rows))
    parts.append(_not_measured(frame))
    config = snap.query("SELECT arg_max(config_text, started_at) AS text FROM sweeps WHERE sweep_id = ?", [sweep])
    if len(config) and config.text.iloc[0]:
        parts.append(f"<h2>Sweep file</h2><pre>{_e(config.text.iloc[0])}</pre>")
    document = (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>farm report: {_e(sweep)}</title>"
                f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>")
    write_file(output, document)
    return f"{len(frame)} cells, {len(measured)} measured, {frame.model.nunique()} model(s)"


def _changes(results: str | Path, sweep: str, against: str, base_results: str | Path | None) -> str:
    """The "Changes against BASE" section: farm.compare's verdicts of this sweep's cells against
    BASE's (UserError, one line, for an unknown BASE or nothing to compare)."""
    from farm.compare import compare_sweeps, render_html

    comparison = compare_sweeps(against, sweep, results, base_results=base_results)
    return f"<h2>Changes against {_e(against)}</h2>" + render_html(comparison)


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _header(snap: Snapshot, sweep: str, frame: pd.DataFrame) -> str:
    runs = snap.query("SELECT description, farm_version, farm_commit, config_hash, started_at FROM sweeps "
                      "WHERE sweep_id = ? ORDER BY started_at DESC", [sweep])
    devices = snap.query("SELECT DISTINCT d.name, d.kind, d.driver_version, d.cuda_version FROM devices d "
                         "JOIN cells c USING (device_id) WHERE c.sweep_id = ?", [sweep])
    counts = ", ".join(f"{n} {s}" for s, n in frame.status.value_counts().items())
    lines = [f"<h1>farm report: {_e(sweep)}</h1>"]
    if len(runs):
        run = runs.iloc[0]
        lines.append(f"<p>{_e(run.description)}</p>")
        lines.append(f"<p class=meta>farm {_e(run.farm_version)} ({_e(run.farm_commit or 'not a checkout')}), "
                     f"sweep file hash {_e(run.config_hash)}, {len(runs)} run(s), last started {_e(run.started_at)}")
    else:
        lines.append("<p class=meta>")
    device_text = "; ".join(
        f"{d.name} ({d.kind}{', driver ' + d.driver_version if isinstance(d.driver_version, str) else ''})"
        for d in devices.itertuples())
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines.append(f"<br>Cells: {_e(counts)}. Devices: {_e(device_text or 'none recorded')}. "
                 f"Report generated {generated}.</p>")
    return "".join(lines)


def _answers(snap: Snapshot, frame: pd.DataFrame, baseline: str | None) -> str:
    """The answer first: per model and batch, the fastest configuration that passes accuracy and
    the fastest that fails (farm.dashboard.summary, as the dashboard's Overview shows it)."""
    table = summary_text(summary(snap, frame, baseline))
    if table.empty:
        return ""
    failing = {i for i, c in enumerate(table.columns) if c.startswith("✗")}
    body = [[f"<span class=fail>✗ {_e(v)}</span>" if i in failing and v != "–"
             else f"<span class=fail>{_e(v)}</span>" if "⚠" in str(v) else _e(v) for i, v in enumerate(row)]
            for row in table.itertuples(index=False)]
    return (f"<h2>Fastest configuration per model and batch</h2><p class=meta>Fastest by samples/s among the cells "
            f"that pass the accuracy check against the fp32 reference; speedup over <b>{_e(baseline)}</b> at the "
            f"same model and batch ({_e(RULE_TEXT)}); accuracy: the figure that decided the verdict, "
            "n: samples compared. ✗: the fastest that fails accuracy, ⚠ where it is the faster one.</p>"
            + _table(table.columns, body, {i for i, c in enumerate(table.columns)
                                           if "accuracy" in c or c in ("model", "sweep", "device", "profile")}))


def _svg(figure) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: the SVG sits inside HTML


def _figure(width: float = 6.2, height: float = 3.6):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "path", "font.size": 9})
    return plt.subplots(figsize=(width, height))


DASHES = ["-", "--", ":", "-."]  # by backend and mode (the series' style); the colour is its precision's hue
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def _looks(rows: pd.DataFrame) -> dict[str, dict]:
    """Per series: colour (farm.dashboard.summary.series_colours: a hue per precision, a shade per
    series, 12 series of 4 precisions in 12 colours), dash and marker by its style."""
    styles = sorted(rows["style"].unique())
    return {s: {"color": c, "linestyle": DASHES[styles.index(st) % len(DASHES)],
                "marker": MARKERS[styles.index(st) % len(MARKERS)]}
            for s, c, st in rows[["series", "colour", "style"]].drop_duplicates("series").itertuples(index=False)}


def _plain_log(axis, low: float, high: float) -> None:
    """A log axis with plain tick labels (3, 10, 3,000: not 1e+04); the minor ticks at 2 and 5
    labelled too where the axis spans under two decades."""
    import math

    from matplotlib.ticker import FuncFormatter, NullFormatter

    def plain(value: float, _: int) -> str:
        return f"{value:,.0f}" if value >= 1 else f"{value:g}"

    axis.set_major_formatter(FuncFormatter(plain))
    few = low > 0 and high > 0 and math.log10(high / low) < 2
    axis.set_minor_formatter(FuncFormatter(
        lambda v, i: plain(v, i) if round(v / 10 ** math.floor(math.log10(v) + 1e-9)) in (2, 5) else "")
                             if few else NullFormatter())


def _chart_against_batch(rows: pd.DataFrame, field: str, title: str) -> str:
    rows = rows[rows.batch.notna()]  # an ingested engine may not say its batch size
    if rows.empty:
        return ""
    figure, axes = _figure()
    looks = _looks(rows)
    for series, points in rows.sort_values("batch").groupby("series"):
        axes.plot(points.batch, points[field], markersize=4, label=series, **looks[series])
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    _plain_log(axes.yaxis, rows[field].min(), rows[field].max())
    batches = sorted(rows.batch.unique())
    axes.set_xticks(batches, [str(b) for b in batches])
    axes.minorticks_off()
    axes.set_xlabel("batch size")
    axes.set_ylabel(title + " (log)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _svg(figure)


def _chart_pareto(rows: pd.DataFrame) -> str:
    figure, axes = _figure(9, 4.2)
    markers = {"pass": "o", "fail": "x", "unjudged": "d", "not checked": "s"}
    looks = _looks(rows)
    for (series, verdict), points in rows.groupby(["series", "accuracy"]):
        axes.scatter(points.latency_p99_ms, points.throughput_samples_per_s, marker=markers[verdict],
                     color=looks[series]["color"], s=28, label=f"{series} ({verdict})")
    for point in rows.itertuples():  # each point's batch size beside it
        if pd.notna(point.batch):
            axes.annotate(f"b{int(point.batch)}", (point.latency_p99_ms, point.throughput_samples_per_s),
                          xytext=(3, 3), textcoords="offset points", fontsize=6, color="#444")
    front = rows[rows.pareto].sort_values("latency_p99_ms")
    axes.plot(front.latency_p99_ms, front.throughput_samples_per_s, linestyle="--", color="#555", linewidth=1)
    axes.set_xscale("log")
    axes.set_yscale("log")
    _plain_log(axes.xaxis, rows.latency_p99_ms.min(), rows.latency_p99_ms.max())
    _plain_log(axes.yaxis, rows.throughput_samples_per_s.min(), rows.throughput_samples_per_s.max())
    axes.set_xlabel("p99 latency (ms), lower is better")
    axes.set_ylabel("throughput (samples/s), higher is better")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _svg(figure)


def _table(headers: Iterable[str], rows: Iterable[Iterable[str]], text_columns: set[int]) -> str:
    head = "".join(f"<th class=text>{_e(h)}</th>" if i in text_columns else f"<th>{_e(h)}</th>"
                   for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f"<td class=text>{c}</td>" if i in text_columns else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_n = number


def _cell_table(rows: pd.DataFrame) -> str:
    out = []
    for r in rows.sort_values(["batch", "throughput_samples_per_s"], ascending=[True, False]).itertuples():
        noise = r.vs_baseline in UNDECIDED
        speedup = "–" if pd.isna(r.speedup) else f"{r.speedup:.3f}×"
        verdict = f"{r.accuracy}: {r.failed_metric}" if r.accuracy in ("fail", "unjudged") else r.accuracy
        ci = f"{_n(r.noise_low_ms)} – {_n(r.noise_high_ms)}" if pd.notna(r.noise_low_ms) else "–"
        if r.noise_source == "stored" and ci != "–":
            ci += " (stored)"
        ratio = (f"{r.latency_ratio:.3f} ({r.ratio_low:.3f} – {r.ratio_high:.3f})" if pd.notna(r.ratio_low)
                 else "–" if pd.isna(r.latency_ratio) else f"{r.latency_ratio:.3f}")
        p99 = _n(r.latency_p99_ms) + (" ⚠" if pd.notna(r.latency_p99_tail_samples)
                                      and r.latency_p99_tail_samples < MIN_TAIL_SAMPLES else "")
        out.append([
            _e(r.series), "–" if pd.isna(r.batch) else str(r.batch), _n(r.throughput_qps), _n(r.throughput_samples_per_s),
            _n(r.latency_median_ms),
            ci, p99, _n(r.latency_cv_percent, 3), "–" if pd.isna(r.stable) else "yes" if r.stable else "no",
            "–" if pd.isna(r.peak_memory_bytes) else format_bytes(r.peak_memory_bytes),
            f"<span class=noise>{speedup}</span>" if noise else speedup,
            f"<span class=noise>{ratio}</span>" if noise else ratio,
            (f"<span class=noise>{_e(r.vs_baseline)}</span>" if noise else _e(r.vs_baseline or "–"))
            + (f" <em>{_e(r.timing_differs)}</em>" if getattr(r, "timing_differs", None) else ""),
            f"<span class={'fail' if r.accuracy == 'fail' else 'pass'}>{_e(verdict)}</span>",
            "●" if r.pareto else "", f"<code>{_e(r.cell_id[:8])}</code>",
        ])
    return _table(["series", "batch", "qps", "samples/s", "p50 ms", "p50 95% CI ms", "p99 ms", "CV %", "stable",
                   "peak memory", "speedup", "p50 / baseline (95% CI)", "vs baseline", "accuracy", "frontier", "cell"],
                  out, {0, 12, 13, 15})


def _top_layers(snap: Snapshot, rows: pd.DataFrame) -> str:
    """Top layers of the model's highest-throughput cell that passes (or was not checked)."""
    candidates = rows[rows.accuracy != "fail"].sort_values("throughput_samples_per_s", ascending=False)
    for cell in candidates.itertuples():
        layers = snap.cell_file(cell.cell_id, "layers")
        if layers.empty:
            continue
        top = top_layers(layers, "time_avg_ms", 10)
        body = [[str(t.layer_index), _e(t.name), _e(t.type), _n(t.time_avg_ms), _n(t.time_share_percent, 3),
                 "–" if pd.isna(t.total_bytes) else format_bytes(t.total_bytes)] for t in top.itertuples()]
        kinds = sorted(layer_kinds(layers, cell.backend).dropna().unique())
        coverage = layer_coverage(snap, cell.cell_id, layers)
        if len(kinds) > 1:  # rows of different kinds are never summed together
            summed = f"{len(layers)} rows of kinds {_e(', '.join(kinds))} (not summed together)"
        else:
            summed = (f"{len(layers)} {_e(kinds[0]) + ' ' if kinds else ''}rows, {layers.time_avg_ms.sum():.4g} ms "
                      "summed" + (f", {coverage:.0f} % of the compute time" if coverage is not None else ""))
        note = coverage_note(coverage)
        warning = f" <span class=fail>⚠ {_e(note)}.</span>" if note else ""
        return (f"<h3>Top layers by time: {_e(cell.label)}</h3><p class=meta>The highest-throughput cell that does "
                f"not fail accuracy; {summed}.{warning}</p>"
                + _table(["#", "layer", "type", "mean ms", "share %", "memory moved"], body, {1, 2}))
    return ""


def _serving(snap: Snapshot, sweep: str) -> str:
    """Per model and p99 bound of the sweep's Server cells, the setup that served the most under it
    (farm.queries.serving_answers, as farm show says it)."""
    from farm.dashboard.serving import answers_of

    answers = answers_of(snap, sweep)
    if not answers:
        return ""
    return ("<h2>Serving under a latency bound</h2><p class=meta>MLPerf LoadGen's Server scenario through farm's "
            "batcher: the highest rate whose test was VALID with p99 under the bound.</p><ul>"
            + "".join(f"<li>{_e(a)}</li>" for a in answers) + "</ul>")


def _not_measured(frame: pd.DataFrame) -> str:
    rows = frame[(frame.status != "ok") | frame.throughput_qps.isna()]
    if rows.empty:
        return ""
    body = [[_e(r.model), _e(r.precision), "–" if pd.isna(r.batch) else str(r.batch), _e(r.backend),
             _e(r.status if r.status != "ok" else "ok, no timing"), _e(r.reason or r.notes)]
            for r in rows.itertuples()]
    return ("<h2>Cells without a measurement</h2>"
            + _table(["model", "precision", "batch", "backend", "status", "reason"], body, {0, 1, 3, 4, 5}))
