"""A comparison as data (JSON for CI), as Markdown (a pull request's comment) and as an HTML
section (`farm report`). Figures in human units: effects in %, latencies in ms."""

from __future__ import annotations

import html
import math
from typing import Any

from farm.compare.core import Comparison, PairResult
from farm.layers.coverage import coverage_note
from farm.text import markdown_text

COLUMNS = ("cell", "configuration", "verdict", "latency change", "95 % CI", "median ms", "throughput",
           "p99", "energy/inference", "accuracy", "notes")


def percent(value: float | None, digits: int = 1) -> str:
    """'+12.3 %', '−4.0 %', '–' for none."""
    if value is None or not math.isfinite(value):
        return "–"
    return f"{100 * value:+.{digits}f} %".replace("-", "−")


def interval(low: float | None, high: float | None) -> str:
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return "–"
    return f"[{percent(low)[:-2]}, {percent(high)[:-2]}] %"


def ms(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.4g}"


def accuracy_text(accuracy: dict[str, Any]) -> str:
    if accuracy.get("change"):
        metric = f" ({accuracy['failed_metric']})" if accuracy.get("failed_metric") else ""
        return f"{accuracy['change']}{metric}"
    return accuracy.get("new") or "–"


def pair_row(pair: PairResult) -> dict[str, str]:
    """One pair as the table's cells (text), keyed by COLUMNS."""
    medians = f"{ms(pair.base.median if pair.base else None)} → {ms(pair.new.median if pair.new else None)}"
    return {"cell": pair.new_id[:8], "configuration": pair.label, "verdict": pair.verdict,
            "latency change": percent(pair.effect.effect), "95 % CI": interval(pair.effect.low, pair.effect.high),
            "median ms": medians, "throughput": percent(pair.throughput_change),
            "p99": percent(pair.p99_change), "energy/inference": percent(pair.energy_change),
            "accuracy": accuracy_text(pair.accuracy), "notes": "; ".join(pair.notes)}


def layer_lines(pair: PairResult) -> list[str]:
    """The explaining layers of a slower pair, a line each, after a line of totals and coverage."""
    found = pair.layers
    if found is None:
        return []
    coverage = (f"layers cover {_share(found.coverage_base)} (BASE) and {_share(found.coverage_new)} (NEW) of "
                "compute")
    # each reason once: both sides' notes name their own percentages, the reason after them is shared
    reasons = {note.split(": ", 1)[1] for percent in (found.coverage_base, found.coverage_new)
               if (note := coverage_note(percent))}
    coverage = "; ".join([coverage, *sorted(reasons)])
    if found.note and not found.rows:
        return [f"{found.note}; {coverage}"]
    statistic = "median" if found.statistic == "time_median_ms" else "mean"
    lines = [f"{found.kind or 'layer'} rows: {found.joined} joined; their {statistic} times add "
             f"{_signed_ms(found.layers_added_ms)} per query against {_signed_ms(found.latency_added_ms)} median "
             f"latency; {coverage}"]
    for row in found.rows:
        name = row["name_new"] or row["name_base"]
        renamed = f" (BASE: {row['name_base']})" if row["name_base"] and row["name_new"] and \
            row["name_base"] != row["name_new"] else ""
        lines.append(f"{name}{renamed} [{row['type']}, {row['match']}]: {ms(row['base_ms'])} → "
                     f"{ms(row['new_ms'])} ms "
                     f"({_signed_ms(row['added_ms'])})")
    return lines


def _share(value: Any) -> str:
    return "?" if value is None or not math.isfinite(value) else f"{value:.0f} %"


def _signed_ms(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:+.4g} ms"


def summary_line(comparison: Comparison) -> str:
    """'2 of 12 matched cells regressed (slower: 2, within noise: 9, inconclusive: 1); 1 cell only in BASE'."""
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(comparison.counts().items()))
    text = (f"{len(comparison.regressed)} of {len(comparison.pairs)} matched cells regressed ({counts}; "
            f"minimum effect {comparison.min_effect_percent:g} %)")
    for side, cells in (("BASE", comparison.only_base), ("NEW", comparison.only_new)):
        if cells:
            text += f"; {len(cells)} cell(s) only in {side}"
    return text


def to_dict(comparison: Comparison) -> dict[str, Any]:
    """Everything a CI job needs, JSON-ready (effects as fractions, latencies in ms)."""
    def figures(pair: PairResult) -> dict[str, Any]:
        layers = pair.layers
        return {
            "label": pair.label, "base_cell": pair.base_id, "new_cell": pair.new_id, "verdict": pair.verdict,
            "regressed": pair.regressed, "effect": _json(pair.effect.effect), "effect_ci_low": _json(pair.effect.low),
            "effect_ci_high": _json(pair.effect.high),
            "base_median_ms": _json(pair.base.median if pair.base else None),
            "new_median_ms": _json(pair.new.median if pair.new else None),
            "basis": [side.basis if side else None for side in (pair.base, pair.new)],
            "throughput_change": _json(pair.throughput_change), "p99_change": _json(pair.p99_change),
            "energy_per_inference_change": _json(pair.energy_change), "accuracy": pair.accuracy, "notes": pair.notes,
            # how far this configuration's runs move (log-scale SD, from `runs_seen` runs); null: too few runs
            "run_spread": _json(pair.run_spread), "runs_seen": pair.runs_seen,
            "layers": None if layers is None else {
                "kind": layers.kind, "note": layers.note, "joined": layers.joined, "statistic": layers.statistic,
                "layers_added_ms": _json(layers.layers_added_ms), "latency_added_ms": _json(layers.latency_added_ms),
                "coverage_base_percent": _json(layers.coverage_base),
                "coverage_new_percent": _json(layers.coverage_new),
                "top": [{k: _json(v) for k, v in row.items()} for row in layers.rows]},
        }
    return {"base": {"sweep": comparison.base_sweep, "results": str(comparison.base_results)},
            "new": {"sweep": comparison.new_sweep, "results": str(comparison.new_results)},
            "min_effect_percent": comparison.min_effect_percent, "regressed": len(comparison.regressed),
            "summary": summary_line(comparison), "counts": comparison.counts(), "allowed": comparison.allowed,
            "pairs": [figures(p) for p in comparison.pairs], "only_base": comparison.only_base,
            "only_new": comparison.only_new}


def _json(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _md(text: str) -> str:
    """Text from the data as Markdown that shows it as written, on one line (farm.display's one rule)."""
    return markdown_text(" ".join(str(text).splitlines()))


def render_markdown(comparison: Comparison) -> str:
    """The comparison as Markdown: a heading, the summary, the table (worst regression first), the
    explaining layers of each slower cell, and the unmatched cells."""
    lines = [f"## farm compare: {_md(comparison.title)}", "",
             _md(summary_line(comparison)) + ".", ""]
    lines += [f"- {_md(a)}" for a in comparison.allowed]
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(_md(v) for v in pair_row(p).values()) + " |" for p in comparison.pairs]
    for pair in comparison.pairs:
        if pair.layers is not None:
            found = layer_lines(pair)
            lines += ["", f"### {pair.new_id[:8]} {_md(pair.label)}: {percent(pair.effect.effect)}", "",
                      _md(found[0]), ""] + [f"- {_md(line)}" for line in found[1:]]
    for side, cells in (("BASE", comparison.only_base), ("NEW", comparison.only_new)):
        if cells:
            lines += ["", f"Only in {side} (no cell of the same configuration on the other side):", ""]
            lines += [f"- {_md(c)}" for c in cells]
    return "\n".join(lines) + "\n"


def render_html(comparison: Comparison) -> str:
    """The comparison as a self-contained HTML <section> (no scripts, no external styles)."""
    e = html.escape
    parts = [f"<section class='farm-compare'><h2>{e(comparison.title)}</h2>",
             f"<p>{e(summary_line(comparison))}.</p>"]
    parts += [f"<p>{e(a)}</p>" for a in comparison.allowed]
    parts.append("<table><thead><tr>" + "".join(f"<th>{e(c)}</th>" for c in COLUMNS) + "</tr></thead><tbody>")
    for pair in comparison.pairs:
        style = " style='background:#fde2e2'" if pair.regressed else ""
        parts.append(f"<tr{style}>" + "".join(f"<td>{e(v)}</td>" for v in pair_row(pair).values()) + "</tr>")
    parts.append("</tbody></table>")
    for pair in comparison.pairs:
        found = layer_lines(pair)
        if found:
            parts.append(f"<h3>{e(pair.new_id[:8])} {e(pair.label)}: {e(percent(pair.effect.effect))}</h3>"
                         f"<p>{e(found[0])}</p><ul>" + "".join(f"<li>{e(x)}</li>" for x in found[1:]) + "</ul>")
    for side, cells in (("BASE", comparison.only_base), ("NEW", comparison.only_new)):
        if cells:
            parts.append(f"<p>Only in {side}:</p><ul>" + "".join(f"<li>{e(c)}</li>" for c in cells) + "</ul>")
    return "".join(parts) + "</section>"
