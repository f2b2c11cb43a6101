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
    from farm.backends.registry import layer_kind
    from farm.layers.coverage import row_kind

    kinds = layers["kind"] if "kind" in layers else pd.Series(None, index=layers.index, dtype=object)
    types = layers["type"] if "type" in layers else pd.Series(None, index=layers.index, dtype=object)
    default = layer_kind(backend)
    return pd.Series([row_kind(k, default, t) for k, t in zip(kinds, types)], index=layers.index, dtype=object)


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


_PRECISIONS = {"float": "fp32", "float32": "fp32", "fp32": "fp32", "half": "fp16", "float16": "fp16", "fp16": "fp16",
               "bfloat16": "bf16", "bf16": "bf16", "int8": "int8", "fp8": "fp8", "float8": "fp8", "int32": "int32",
               "int64": "int64", "bool": "bool", "uint8": "uint8", "int4": "int4"}


def layer_precision(output_dtypes: Any) -> str | None:
    """A layer's precision: the type of its first output as the row gives it ('Int8', 'Half',
    'float32' -> int8, fp16, fp32); None where the row carries no type."""
    if not isinstance(output_dtypes, str) or not output_dtypes.strip():
        return None
    first = output_dtypes.split(",")[0].strip().lower()
    token = first.split()[0].split("(")[0] if first else ""
    return _PRECISIONS.get(token, token or None)


def time_by_type(layers: pd.DataFrame, kinds: pd.Series) -> pd.DataFrame:
    """Σ time per layer type (TREx's time share by layer type): kind, type, layers, time_ms and
    share_percent of the Σ layer time of its kind (kinds are never summed together); slowest first."""
    frame = pd.DataFrame({"kind": kinds.fillna("unknown").astype(str), "type": layers["type"].fillna("?").astype(str),
                          "time_ms": layers.time_avg_ms.astype(float)})
    grouped = frame.groupby(["kind", "type"], as_index=False).agg(layers=("time_ms", "size"),
                                                                 time_ms=("time_ms", "sum"))
    totals = grouped.groupby("kind").time_ms.transform("sum")
    grouped["share_percent"] = 100 * grouped.time_ms / totals.where(totals > 0)
    return grouped.sort_values(["kind", "time_ms"], ascending=[True, False]).reset_index(drop=True)


def precision_table(layers: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per layer: layer_index, name, type, precision, time_avg_ms; per precision: layers, time_ms,
    share_percent of the time of the layers whose precision is known). Rows without a type are left
    out of both (torch.compile's kernels carry none)."""
    per_layer = pd.DataFrame({"layer_index": layers.layer_index, "name": layers["name"], "type": layers["type"],
                              "precision": layers.output_dtypes.map(layer_precision),
                              "time_avg_ms": layers.time_avg_ms.astype(float)}).dropna(subset=["precision"])
    summary = per_layer.groupby("precision", as_index=False).agg(layers=("name", "size"),
                                                                 time_ms=("time_avg_ms", "sum"))
    total = summary.time_ms.sum()
    summary["share_percent"] = 100 * summary.time_ms / total if total > 0 else float("nan")
    return (per_layer.sort_values("layer_index").reset_index(drop=True),
            summary.sort_values("time_ms", ascending=False).reset_index(drop=True))


def memory_table(layers: pd.DataFrame) -> pd.DataFrame:
    """Per layer with a known size (the engine explorer's rule, farm.layers.memory): input, weight,
    output and total bytes as MiB, largest first."""
    known = layers.dropna(subset=["total_bytes"])
    mib = {f"{part}_mib": known[f"{part}_bytes"].astype(float) / 2**20
           for part in ("input", "weight", "output", "total")}
    frame = pd.DataFrame({"layer_index": known.layer_index, "name": known["name"], "type": known["type"], **mib})
    return frame.sort_values("total_mib", ascending=False).reset_index(drop=True)


def has_layer_edges(layers: pd.DataFrame) -> bool:
    """Whether any layer reads a tensor another writes (farm.layers.graph.has_edges)."""
    from farm.layers.graph import has_edges

    return has_edges(graph_rows(layers))


def layer_list(layers: pd.DataFrame, search: str = "") -> pd.DataFrame:
    """The layers in execution order, for the searchable list shown where no edges are known:
    those whose name or type contains `search` (case-insensitive)."""
    frame = layers.sort_values("layer_index")[["layer_index", "name", "type", "time_avg_ms", "time_share_percent"]]
    frame = frame.assign(total_mib=layers.total_bytes.astype(float) / 2**20).reset_index(drop=True)
    if search:
        text = frame["name"].fillna("") + " " + frame["type"].fillna("")
        frame = frame[text.str.contains(search, case=False, regex=False)].reset_index(drop=True)
    return frame


_DEFAULTS: dict[int, str | None] = {}


def default_cell(snap: Snapshot, limit: int = 40) -> str | None:
    """The Cell page's first cell: the first ok cell whose layers have edges (so its graph is a
    graph), looking at up to `limit` ok cells; else the first ok cell with layers; else the first
    ok cell. Remembered per snapshot."""
    key = id(snap)
    if key not in _DEFAULTS:
        ok = snap.cell_frame[snap.cell_frame.status == "ok"].cell_id.tolist()
        with_layers = None
        for cell_id in ok[:limit]:
            layers = snap.cell_file(cell_id, "layers")
            if layers.empty:
                continue
            with_layers = with_layers or cell_id
            if has_layer_edges(layers):
                with_layers = cell_id
                break
        _DEFAULTS.clear()  # one snapshot at a time: a new one (a cell written) chooses again
        _DEFAULTS[key] = with_layers or (ok[0] if ok else None)
    return _DEFAULTS[key]
