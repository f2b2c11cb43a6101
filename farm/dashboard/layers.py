"""Per-layer comparisons of the dashboard and `farm report`: layer kinds, the layer diff of two
cells, layer coverage, the top layers and the rows `farm graph` draws."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from farm.dashboard.data import Snapshot


class LayersNotComparable(ValueError):
    """Two cells' layer rows are of different kinds (farm.layers.coverage): no sum or diff of them."""


def layer_kinds(layers: pd.DataFrame, backend: Any = None) -> pd.Series:
    """Each row's kind (`graph op`, `kernel`, `engine layer`); rows written before the `kind`
    column get theirs from the cell's backend (farm.layers.coverage.row_kind)."""
    from farm.layers.coverage import row_kind

    kinds = layers["kind"] if "kind" in layers else pd.Series(None, index=layers.index, dtype=object)
    types = layers["type"] if "type" in layers else pd.Series(None, index=layers.index, dtype=object)
    return pd.Series([row_kind(k, backend, t) for k, t in zip(kinds, types)], index=layers.index, dtype=object)


def layers_not_comparable(left: pd.DataFrame, right: pd.DataFrame, backend_a: Any = None,
                          backend_b: Any = None) -> str | None:
    """Why the two cells' layers cannot be summed against each other or diffed, or None."""
    from farm.layers.coverage import not_comparable

    return not_comparable(layer_kinds(left, backend_a), layer_kinds(right, backend_b))


def layer_diff(left: pd.DataFrame, right: pd.DataFrame, backend_a: Any = None, backend_b: Any = None) -> pd.DataFrame:
    """Per-layer rows of two cells matched by name with TensorRT's renamings undone (PWN(...),
    profile suffixes); repeated names match in execution order. Unmatched layers appear once with
    the other side empty, so the totals of both sides stay complete. Rows of different kinds
    (an eager cell's graph ops against a compiled cell's kernels) raise LayersNotComparable."""
    from farm.trt_output import join_key

    reason = layers_not_comparable(left, right, backend_a, backend_b)
    if reason:
        raise LayersNotComparable(reason)

    def keyed(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.sort_values("layer_index").copy()
        frame["key"] = frame["name"].map(join_key)
        frame["occurrence"] = frame.groupby("key").cumcount()
        return frame[["key", "occurrence", "name", "type", "time_avg_ms", "total_bytes", "layer_index"]]

    merged = keyed(left).merge(keyed(right), on=["key", "occurrence"], how="outer", suffixes=("_a", "_b"))
    merged["match"] = "both"
    merged.loc[merged.name_b.isna(), "match"] = "only A"
    merged.loc[merged.name_a.isna(), "match"] = "only B"
    merged["time_delta_ms"] = merged.time_avg_ms_b.fillna(0) - merged.time_avg_ms_a.fillna(0)
    merged["time_delta_percent"] = 100 * merged.time_delta_ms / merged.time_avg_ms_a.where(merged.time_avg_ms_a > 0)
    merged["bytes_delta"] = merged.total_bytes_b.astype("Float64") - merged.total_bytes_a.astype("Float64")
    order = merged.time_delta_ms.abs().sort_values(ascending=False).index
    columns = ["match", "name_a", "name_b", "type_a", "type_b", "time_avg_ms_a", "time_avg_ms_b", "time_delta_ms",
               "time_delta_percent", "total_bytes_a", "total_bytes_b", "bytes_delta"]
    return merged.loc[order, columns].reset_index(drop=True)


def layer_coverage(snap: Snapshot, cell_id: str, layers: pd.DataFrame) -> float | None:
    """The cell's `layer_coverage_percent` (Σ layer time ÷ compute time, in %); for rows written
    before the column existed, computed the same way from its layers and measurements rows."""
    from farm.layers.coverage import compute_ms, coverage_percent

    row = snap.query("SELECT layer_coverage_percent, compute_median_ms, latency_median_ms FROM measurements "
                     "WHERE cell_id = ?", [cell_id])
    if row.empty:
        return None
    stored = row.layer_coverage_percent.iloc[0]
    if pd.notna(stored):
        return float(stored)
    measurement = {k: (None if pd.isna(v) else float(v)) for k, v in row.iloc[0].items()}
    return coverage_percent(layers.time_avg_ms.dropna().tolist(), compute_ms(measurement))


def top_layers(layers: pd.DataFrame, by: str, n: int = 15) -> pd.DataFrame:
    columns = ["layer_index", "name", "type", "time_avg_ms", "time_share_percent", "input_bytes", "weight_bytes",
               "output_bytes", "total_bytes", "tactic"]
    return layers.dropna(subset=[by]).sort_values(by, ascending=False).head(n)[columns].reset_index(drop=True)


def graph_rows(layers: pd.DataFrame) -> list[dict[str, Any]]:
    """Layer rows in the shape farm.layers.graph draws (what `farm graph` reads from SQL)."""
    columns = ["layer_index", "name", "type", "output_dtypes", "time_share_percent", "time_avg_ms", "total_bytes",
               "input_tensors", "output_tensors"]
    ordered = layers.sort_values("layer_index")[columns].astype(object)
    return ordered.where(ordered.notna(), None).to_dict("records")
