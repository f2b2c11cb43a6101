"""The layers that explain a slower cell: both cells' per-layer rows joined by name (TensorRT's
renamings undone, farm.trt_output.join_key: PWN(...) wrappers, profile suffixes; a name repeated
joins in execution order), rows of one kind only (graph ops, kernels or engine layers are not the
same units of work: farm.layers.coverage), ranked by the time they added per query."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

TOP_LAYERS = 8


@dataclass
class LayerExplanation:
    """`rows`: the layers that added the most time, most first (name_base, name_new, type,
    base_ms, new_ms, added_ms, match: 'both', 'only BASE' or 'only NEW'); `layers_added_ms`: the
    sum of every joined layer's change; `latency_added_ms`: the median latency's change; coverage:
    each cell's Σ layer time ÷ compute time (%); `note`: why there are no rows, if there are none."""

    kind: str | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    layers_added_ms: float | None = None
    latency_added_ms: float | None = None
    coverage_base: float | None = None
    coverage_new: float | None = None
    joined: int = 0
    note: str | None = None
    statistic: str = "time_avg_ms"  # the layers' per-query time compared: their median, else their mean


def _time(row: dict[str, Any], column: str) -> float | None:
    value = row.get(column)
    return float(value) if value is not None and math.isfinite(value) else None


def time_column(*sides: list[dict[str, Any]]) -> str:
    """`time_median_ms` where every row of both cells has one (a layer's median over the profiled
    queries: one preempted query does not make it the top layer), else `time_avg_ms`."""
    rows = [r for side in sides for r in side]
    return "time_median_ms" if rows and all(_time(r, "time_median_ms") is not None for r in rows) else "time_avg_ms"


def _keyed(rows: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    from farm.trt_output import join_key

    seen: dict[str, int] = {}
    keyed = {}
    for row in rows:
        key = join_key(str(row.get("name") or ""))
        keyed[(key, seen.get(key, 0))] = row
        seen[key] = seen.get(key, 0) + 1
    return keyed


def explain(base_rows: list[dict[str, Any]], new_rows: list[dict[str, Any]], base_backend: Any = None,
            new_backend: Any = None, top: int = TOP_LAYERS) -> LayerExplanation:
    """The layers of two cells (BASE, NEW) joined and ranked by added time; a note instead where
    either has no timed rows or their rows are of different kinds."""
    from farm.backends.registry import layer_kind
    from farm.layers.coverage import not_comparable, row_kind

    if not base_rows or not new_rows:
        side = "BASE" if not base_rows else "NEW"
        return LayerExplanation(note=f"no per-layer rows for the {side} cell (its backend or run recorded none)")
    kinds = [[row_kind(r.get("kind"), layer_kind(backend), r.get("type")) for r in rows]
             for rows, backend in ((base_rows, base_backend), (new_rows, new_backend))]
    reason = not_comparable(*kinds)
    if reason:
        return LayerExplanation(note=reason)
    base, new = _keyed(base_rows), _keyed(new_rows)
    column = time_column(base_rows, new_rows)
    joined = []
    for key in dict.fromkeys([*base, *new]):
        a, b = base.get(key), new.get(key)
        a_ms, b_ms = (_time(r, column) if r else None for r in (a, b))
        if a_ms is None and b_ms is None:
            continue
        joined.append({"name_base": a.get("name") if a else None, "name_new": b.get("name") if b else None,
                       "type": (b or a).get("type"), "base_ms": a_ms, "new_ms": b_ms,
                       "added_ms": (b_ms or 0.0) - (a_ms or 0.0),
                       "match": "both" if a and b else "only BASE" if a else "only NEW"})
    ranked = sorted((r for r in joined if r["added_ms"] > 0), key=lambda r: -r["added_ms"])
    return LayerExplanation(kind=next((k for k in kinds[1] if k), None), rows=ranked[:top], statistic=column,
                            layers_added_ms=sum(r["added_ms"] for r in joined), joined=len(joined),
                            note=None if ranked else "no layer took longer")
