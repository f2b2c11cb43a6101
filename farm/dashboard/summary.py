"""The answer first: per model and batch size, the fastest configuration that passes accuracy
(its throughput, p99, speedup over a baseline, accuracy figure with the samples compared, peak
memory, energy per inference) and beside it the fastest one that fails accuracy. The dashboard's
Overview page and the report's header show `summary`; `default_baseline` is the baseline both
start from, and the Compare page's; `series_colours` colours a chart's series by precision.
No Streamlit here (data layer: the report and the tests call it directly).
"""

from __future__ import annotations

import json
import math
import tomllib
from typing import Any

import pandas as pd

from farm.dashboard.data import Snapshot, with_noise_intervals, with_speedup

# Per cell: the accuracy row that decided its verdict (a failing output first, then by name) and the
# fewest samples any of its outputs compared (n).
ACCURACY_SQL = """
SELECT cell_id, verdict, worst_metric, worst_value, min(n) OVER (PARTITION BY cell_id) AS n
FROM accuracy WHERE list_contains(?, cell_id)
QUALIFY row_number() OVER (PARTITION BY cell_id ORDER BY verdict = 'pass', output_name) = 1"""

# Hue family per precision (dark to light): one colour per series, the precision read from its hue.
# Six shades a hue, dark to light (ColorBrewer's 9-class sequential schemes, the palest left out):
# a precision keeps its hue for up to six series (the GPU example has five engines a precision).
FAMILIES = {
    "blue": ["#08306b", "#08519c", "#2171b5", "#4292c6", "#6baed6", "#9ecae1"],
    "purple": ["#3f007d", "#54278f", "#6a51a3", "#807dba", "#9e9ac8", "#bcbddc"],
    "green": ["#00441b", "#006d2c", "#238b45", "#41ab5d", "#74c476", "#a1d99b"],
    "orange": ["#7f2704", "#a63603", "#d94801", "#f16913", "#fd8d3c", "#fdae6b"],
    "red": ["#67000d", "#a50f15", "#cb181d", "#ef3b2c", "#fb6a4a", "#fc9272"],
    "brown": ["#543005", "#6b4c1a", "#8c510a", "#8c6d31", "#bf812d", "#dfc27d"],
    "pink": ["#49006a", "#7a0177", "#ae017e", "#dd3497", "#f768a1", "#fa9fb5"],
    "grey": ["#000000", "#252525", "#525252", "#737373", "#969696", "#bdbdbd"],
}
# where a precision has more series than shades: grey first (no precision's hue), then the hues of
# precisions the frame does not have, int8's red last (an extra fp32 series in red read as int8)
SPARE_ORDER = ("grey", "pink", "brown", "purple", "orange", "green", "blue", "red")
PRECISION_RANK = {p: i for i, p in enumerate(("fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4"))}
PRECISION_FAMILY = {"fp32": "blue", "tf32": "purple", "fp16": "green", "bf16": "orange", "int8": "red",
                    "fp8": "brown", "int4": "pink"}


def listed_backends(snap: Snapshot, sweeps: list[str]) -> list[str]:
    """The backends in the order the sweeps' files list them (`[axes] backends`), every run's file
    of each sweep, oldest first: a later run of a narrower file (one backend rerun) does not move
    the order, and so not the default baseline (farm's default, onnxruntime, where a file names none)."""
    texts = snap.query("SELECT sweep_id, config_text AS text FROM sweeps WHERE list_contains(?, sweep_id) "
                       "ORDER BY sweep_id, started_at", [list(sweeps)])
    order: list[str] = []
    for text in texts.text:
        try:
            backends = tomllib.loads(text).get("axes", {}).get("backends", ["onnxruntime"]) if text else []
        except tomllib.TOMLDecodeError:
            backends = []
        order += [b for b in backends if isinstance(b, str) and b not in order]
    return order


def default_baseline(frame: pd.DataFrame, backends: list[str]) -> str | None:
    """The series speedup is measured against unless the user picks another: fp32 on the first
    backend the sweep lists (`listed_backends`), in eager mode where the backend has modes; the
    nearest there is otherwise (fp32 on another backend; without fp32, the widest precision there
    is: tf32, fp16, bf16, ...)."""
    measured = frame[(frame.status == "ok") & frame.throughput_qps.notna()]
    if measured.empty:
        return None
    rank = {b: i for i, b in enumerate(backends)}
    mode = measured.options.map(lambda text: _options(text).get("mode"))
    ordered = measured.assign(
        _precision=measured.precision.map(lambda p: PRECISION_RANK.get(p, len(PRECISION_RANK))),
        _backend=measured.backend.map(lambda b: rank.get(b, len(rank))),
        _eager=mode.map(lambda m: m is not None and m != "eager"), _series=measured.series)
    ordered = ordered.sort_values(["_precision", "_backend", "_eager", "_series"], kind="stable")
    return str(ordered.series.iloc[0])


def _options(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text) if isinstance(text, str) else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def group_keys(frame: pd.DataFrame) -> list[str]:
    """What one summary row stands for: model and batch, plus the profile, device and sweep where
    they vary (a configuration is only an alternative to another of the same of each)."""
    keys = ["model", "batch"]
    if frame.profile.notna().any():
        keys.append("profile")
    if frame.device.nunique() > 1:
        keys.append("device")
    if frame.sweep_id.nunique() > 1:
        keys.append("sweep_id")
    return keys


def metric_text(metric: Any, value: Any) -> str:
    """An accuracy figure as people read it: 'top-1 agreement 99.2 %', 'cosine 0.999981'; an
    unjudged output's reason as it is ('reference ~0 on these inputs (...)')."""
    if not isinstance(metric, str):
        return ""
    if value is None or pd.isna(value):
        return metric if " " in metric else ""  # a reason, not a metric's name
    if metric.endswith("_agreement"):
        return f"top-{metric[3]} agreement {100 * value:.1f} %"
    if metric == "cosine_similarity":  # enough decimals to show how far from 1: 0.99999956, not 1.000
        gap = 1 - value
        decimals = 4 if gap <= 0 or gap >= 1e-4 else min(12, int(-math.log10(gap)) + 2)
        return f"cosine {value:.{decimals}f}"
    return f"{metric.replace('_', ' ')} {value:.4g}"


SUMMARY_FIELDS = ["series", "cell_id", "throughput_samples_per_s", "throughput_qps", "latency_p99_ms", "speedup",
                  "vs_baseline", "verdict", "accuracy", "n", "peak_memory_bytes", "energy_per_sample_mj"]


def summary(snap: Snapshot, frame: pd.DataFrame, baseline: str | None) -> pd.DataFrame:
    """One row per model and batch (`group_keys`): the fastest cell (samples/s) that passes
    accuracy, as SUMMARY_FIELDS (accuracy: the figure that decided the verdict, `metric_text`; n:
    samples compared, None where the warehouse does not record it), and the fastest that fails,
    as the same fields prefixed `fail_`; `fail_faster` marks where the failing one is the faster.
    Where no cell of a group had its accuracy judged, the fastest unchecked or unjudged cell stands
    in (its verdict None or 'unjudged'). `frame` holds the cells (with `series`, `series_labels` of the chosen sweeps)."""
    measured = frame[(frame.status == "ok") & frame.throughput_samples_per_s.notna()]
    keys = group_keys(frame)
    columns = keys + SUMMARY_FIELDS + [f"fail_{f}" for f in SUMMARY_FIELDS] + ["fail_faster"]
    if measured.empty:
        return pd.DataFrame(columns=columns)
    ranked = measured.sort_values("throughput_samples_per_s", ascending=False, kind="stable")
    judged = ranked.verdict.isin(["pass", "fail"])
    checked = judged.groupby([ranked[k] for k in keys], dropna=False).transform("any")
    best = ranked[(ranked.verdict == "pass") | (~judged & ~checked)].drop_duplicates(keys)
    failing = ranked[ranked.verdict == "fail"].drop_duplicates(keys)
    base = measured[measured.series == baseline].drop_duplicates(["model", "batch"])
    chosen = pd.concat([best, failing, base]).drop_duplicates("cell_id")
    figures = with_speedup(with_noise_intervals(snap, chosen), baseline).set_index("cell_id")
    accuracy = snap.query(ACCURACY_SQL, [chosen.cell_id.tolist()]).set_index("cell_id")
    figures = figures.join(accuracy[["worst_metric", "worst_value", "n"]])
    figures["accuracy"] = [
        (f"{v}: " if isinstance(v, str) else "not checked") + metric_text(m, x)
        for v, m, x in zip(figures.verdict, figures.worst_metric, figures.worst_value)]
    figures["n"] = figures.n.astype("Int64")
    fields = [f for f in SUMMARY_FIELDS if f != "cell_id"]
    out = measured[keys].drop_duplicates().sort_values(keys, kind="stable")
    for rows, prefix in ((best, ""), (failing, "fail_")):
        picked = rows[keys + ["cell_id"]].join(figures[fields], on="cell_id")
        out = out.merge(picked.rename(columns={c: prefix + c for c in fields + ["cell_id"]}), on=keys, how="left")
    out["fail_faster"] = (out.fail_throughput_samples_per_s > out.throughput_samples_per_s.fillna(0)).fillna(False)
    return out[columns].reset_index(drop=True)


def series_colours(frame: pd.DataFrame) -> dict[str, str]:
    """A colour per series (`series` column), every one different: its precision's hue family (fp32
    blue, fp16 green, bf16 orange, tf32 purple, int8 red, ...), a shade per series within it (six),
    so the precision reads from the hue. A precision with more series than that, or one with no hue
    of its own, takes colours of the families no precision of the frame uses (SPARE_ORDER: grey
    first, red last); past them, colours repeat (charts also tell backends apart by dash and marker)."""
    pairs = frame[["series", "precision"]].drop_duplicates("series").sort_values(["precision", "series"])
    precisions = list(dict.fromkeys(pairs.precision.astype(str)))
    free = [f for f in SPARE_ORDER if f not in PRECISION_FAMILY.values()] + list(SPARE_ORDER)
    family: dict[str, str] = {}
    for precision in precisions:
        family[precision] = PRECISION_FAMILY.get(precision) or free[len(family) % len(free)]
    spare = [shade for name in SPARE_ORDER if name not in family.values() for shade in FAMILIES[name]]
    colours, used = {}, {}
    for series, precision in zip(pairs.series, pairs.precision.astype(str)):
        shades, k = FAMILIES[family[precision]], used.get(precision, 0)
        if k < len(shades):
            colours[series] = shades[k]
        else:
            colours[series] = spare.pop(0) if spare else shades[k % len(shades)]
        used[precision] = k + 1
    return colours


def summary_text(table: pd.DataFrame) -> pd.DataFrame:
    """`summary`'s rows as people read them: 4 significant digits, speedups as '3.39× (faster)',
    bytes in MiB/GiB, the accuracy figure with n, the failing configuration marked ✗ (and its
    throughput '⚠ faster' where it beats the passing one); the energy column only where some cell
    has an energy figure. The Overview page and the report's header show this."""
    from farm.dashboard.data import number
    from farm.layers.memory import format_bytes

    def text(value: Any, shown) -> str:
        return "–" if value is None or pd.isna(value) else shown(value)

    def times(value: Any, verdict: Any) -> str:
        return text(value, lambda v: f"{v:.2f}×" + (f" ({verdict})" if isinstance(verdict, str) else ""))

    def accuracy(figure: Any, verdict: Any, n: Any) -> str:
        if not isinstance(verdict, str):
            return "not checked" if isinstance(figure, str) else "–"
        shown = figure.split(": ", 1)[-1] or verdict
        return shown + (", n unknown" if pd.isna(n) else f", n = {int(n):,}")

    keys = [k for k in ("model", "batch", "profile", "device", "sweep_id") if k in table]
    out = table[keys].astype(object).rename(columns={"sweep_id": "sweep"})
    out["fastest that passes accuracy"] = table.series.fillna("– (none passes)")
    out["samples/s"] = table.throughput_samples_per_s.map(number)
    out["p99 ms"] = table.latency_p99_ms.map(number)
    out["speedup"] = [times(v, w) for v, w in zip(table.speedup, table.vs_baseline)]
    out["accuracy"] = [accuracy(f, v, n) for f, v, n in zip(table.accuracy, table.verdict, table.n)]
    out["peak memory"] = table.peak_memory_bytes.map(lambda v: text(v, format_bytes))
    if table.energy_per_sample_mj.notna().any() or table.fail_energy_per_sample_mj.notna().any():
        out["mJ / inference"] = table.energy_per_sample_mj.map(number)  # per sample: a query is `batch` inferences
    out["✗ fastest that fails accuracy"] = table.fail_series.fillna("–")
    out["its samples/s"] = [text(v, number) + (" ⚠ faster" if faster else "")
                            for v, faster in zip(table.fail_throughput_samples_per_s, table.fail_faster)]
    out["its speedup"] = [times(v, w) for v, w in zip(table.fail_speedup, table.fail_vs_baseline)]
    out["its accuracy"] = [accuracy(f, v, n) for f, v, n in zip(table.fail_accuracy, table.fail_verdict,
                                                                  table.fail_n)]
    return out.reset_index(drop=True)
