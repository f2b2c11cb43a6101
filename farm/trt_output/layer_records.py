"""`layers` rows of a TensorRT engine: its layers (from a log or an inspector JSON) joined to the
per-layer profile by name (`join_layers`: TensorRT's renamings undone) and to the builder's
per-layer memory lines."""

from __future__ import annotations

import dataclasses

from farm.records import LayerRecord
from farm.trt_output.engine_layers import EngineLayer, Tensor, join_key, join_layers, member_nodes
from farm.trt_output.json_files import Profile


@dataclasses.dataclass
class LayerRecords:
    """The rows, and what did not join: profile rows with no layer, layers with no profile row."""

    records: list[LayerRecord]
    unmatched_profile_rows: list[str]
    unmatched_layers: list[str]


def LayerRecordsFromEngineLayers(layers: list[EngineLayer], profile: Profile | None,
                                 layer_memory: dict[str, dict[str, int]]) -> LayerRecords:
    """One row per engine layer, with its profile times where a row names it and its memory where
    the builder logged it; then a row per timed name with no layer information (times only)."""
    rows = profile.rows if profile else []
    matched, unmatched_rows, unmatched_layers = join_layers(layers, [r.name for r in rows])
    row_of_layer = {index: rows[[r.name for r in rows].index(name)] for name, index in matched.items()}
    memory = {join_key(k): v for k, v in layer_memory.items()}
    records = []
    for index, layer in enumerate(layers):
        row = row_of_layer.get(index)
        mem = layer_memory.get(layer.name) or memory.get(join_key(layer.name)) or {}
        records.append(LayerRecord(
            index=index, name=layer.name, type=layer.type or "?", times_ms=[], tactic=layer.tactic,
            input_tensors=[t.name for t in layer.inputs], output_tensors=[t.name for t in layer.outputs],
            input_shapes=[_display_dims(t) for t in layer.inputs], input_dtypes=[t.dtype or "?" for t in layer.inputs],
            output_shapes=[_display_dims(t) for t in layer.outputs],
            output_dtypes=[t.dtype or "?" for t in layer.outputs],
            input_bytes=layer.input_bytes, weight_bytes=layer.weight_bytes, output_bytes=layer.output_bytes,
            macs=layer.macs, fused_ops=" + ".join(_fused(layer.name)) or None,
            time_avg_ms=row.average_ms if row else None, time_median_ms=row.median_ms if row else None,
            time_share_percent=row.percentage if row else None,
            calls=profile.count if row and profile else None, **mem,
        ))
    for name in unmatched_rows:  # timed rows with no layer information: times only, sizes unknown
        row = next(r for r in rows if r.name == name)
        records.append(LayerRecord(index=len(records), name=name, type="?", times_ms=[], time_avg_ms=row.average_ms,
                                   time_median_ms=row.median_ms, time_share_percent=row.percentage,
                                   calls=profile.count if profile else None))
    return LayerRecords(records=records, unmatched_profile_rows=unmatched_rows if layers else [],
                        unmatched_layers=unmatched_layers if rows else [])


def _display_dims(tensor: Tensor) -> list[int] | None:
    """Dimensions as printed (negative = dynamic), vector formats reduced to the logical size."""
    if not tensor.raw_dims:
        return tensor.dims
    try:
        return [int(p.strip().split(":")[0]) for p in tensor.raw_dims.split(",") if p.strip()]
    except ValueError:
        return None


def _fused(name: str) -> list[str]:
    members = member_nodes(name)
    return members if len(members) > 1 else []
