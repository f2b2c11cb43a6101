"""The warehouse's tables: their columns and types, which columns a row must have, and the check
of rows (writers) and of files (readers, `farm check`) against them.

Every column is listed with its unit in docs/warehouse.md (a test checks that).

Rows are checked as the config checks keys: a column the table does not have is an error naming
it (a misspelt metric would otherwise be written as NULL, silently). The columns in
`REQUIRED_COLUMNS` must be present and not null in every row: the keys every query joins on and
what makes the row mean anything; every other column may be absent (written as NULL), because
backends, ingested files and older farms know different figures.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from farm.errors import first_line
from farm.measurement_row import arrow_fields

SCHEMA_VERSION = 1
CACHE_DIR_NAME = ".cache"
LOCK_NAME = ".lock"  # <root>/.lock: the writer lock; holds the holder's pid, host, command, start
MARKER_NAME = ".farm-warehouse"  # <root>/.farm-warehouse: JSON, farm's version and the schema version
DAMAGED_DIR_NAME = ".damaged"  # <root>/<sweep>/.damaged/<table>/: files moved aside by writers
KEPT_STATUSES = frozenset({"ok", "unsupported"})  # a rerun redoes failed and skipped cells
UNMEASURED = "an ok cell with no measurements file (left by a run killed while it moved a damaged file aside)"

_ts = pa.timestamp("us", tz="UTC")


def _schema(*fields: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(n, t) for n, t in fields])


SCHEMAS: dict[str, pa.Schema] = {
    "sweeps": _schema(
        ("run_id", pa.string()), ("sweep_id", pa.string()), ("name", pa.string()), ("description", pa.string()),
        ("config_path", pa.string()), ("config_text", pa.string()), ("config_hash", pa.string()),
        ("farm_version", pa.string()), ("farm_commit", pa.string()), ("schema_version", pa.int32()),
        ("host", pa.string()), ("command", pa.string()), ("executor", pa.string()),
        ("cells_planned", pa.int32()), ("cells_to_run", pa.int32()), ("cells_resumed", pa.int32()),
        ("started_at", _ts), ("finished_at", _ts), ("planned_cell_ids", pa.list_(pa.string())),
    ),
    "cells": _schema(
        ("cell_id", pa.string()), ("sweep_id", pa.string()), ("run_id", pa.string()),
        ("model", pa.string()), ("model_source", pa.string()), ("model_sha256", pa.string()),
        ("model_bytes", pa.int64()), ("precision", pa.string()), ("batch", pa.int32()),
        ("profile", pa.string()), ("profile_ranges", pa.string()), ("backend", pa.string()),
        ("options", pa.string()), ("shapes", pa.string()), ("status", pa.string()),
        ("reason", pa.string()), ("traceback", pa.string()), ("notes", pa.string()),
        ("device_id", pa.string()), ("worker", pa.string()), ("host", pa.string()), ("cpu_model", pa.string()),
        ("cpu_cores", pa.int32()),
        ("versions", pa.string()), ("farm_version", pa.string()), ("farm_commit", pa.string()),
        ("config_hash", pa.string()), ("started_at", _ts), ("finished_at", _ts), ("duration_s", pa.float64()),
        ("ingested_on", pa.string()), ("attempts", pa.int32()), ("earlier_attempts", pa.string()),
        ("scenario", pa.string()),
    ),
    "builds": _schema(
        ("cell_id", pa.string()), ("build_s", pa.float64()),
        ("artifact_bytes", pa.int64()), ("cache_hits", pa.int64()), ("builder_peak_memory_bytes", pa.int64()),
        ("layers_before_fusion", pa.int32()), ("layers_after_fusion", pa.int32()),
        ("layers_with_reformats", pa.int32()), ("builder_peak_host_memory_bytes", pa.int64()),
        ("engine_host_persistent_bytes", pa.int64()), ("engine_device_persistent_bytes", pa.int64()),
        ("engine_scratch_bytes", pa.int64()), ("precision_transform_s", pa.float64()),
        ("precision_transform_cached", pa.bool_()), ("calibration", pa.string()),
        ("transform_summary", pa.string()), ("transform_tool", pa.string()), ("transform_tensors_fp16", pa.int32()),
        ("transform_nodes_kept_fp32", pa.int32()), ("transform_nodes_kept_fp32_range", pa.int32()),
        ("transform_subgraphs", pa.int32()), ("transform_qdq_pairs", pa.int32()),
        ("transform_quantized_nodes", pa.int32()), ("transform_layers", pa.string()),
        ("provider_nodes", pa.string()), ("cpu_provider_nodes", pa.int32()), ("cpu_provider_ops", pa.string()),
        ("cpu_provider_node_ms", pa.float64()),
    ),
    # its columns are farm.measurement_row.MeasurementRow's fields (docs/warehouse.md's table is made from them too)
    "measurements": _schema(("cell_id", pa.string()), *arrow_fields()),
    "samples": _schema(
        ("cell_id", pa.string()), ("repeat", pa.int32()), ("iteration", pa.int32()),
        ("start_ms", pa.float64()), ("latency_ms", pa.float64()), ("enqueue_ms", pa.float64()),
        ("h2d_ms", pa.float64()), ("compute_ms", pa.float64()), ("d2h_ms", pa.float64()),
    ),
    "layers": _schema(
        ("cell_id", pa.string()), ("layer_index", pa.int32()), ("name", pa.string()),
        ("type", pa.string()), ("fused_ops", pa.string()), ("tactic", pa.string()),
        ("input_tensors", pa.string()), ("input_shapes", pa.string()), ("input_dtypes", pa.string()),
        ("output_tensors", pa.string()), ("output_shapes", pa.string()), ("output_dtypes", pa.string()),
        ("input_bytes", pa.int64()), ("weight_bytes", pa.int64()), ("output_bytes", pa.int64()),
        ("total_bytes", pa.int64()), ("macs", pa.int64()), ("calls", pa.int32()),
        ("time_avg_ms", pa.float64()), ("time_median_ms", pa.float64()), ("time_share_percent", pa.float64()),
        ("host_persistent_bytes", pa.int64()), ("device_persistent_bytes", pa.int64()), ("scratch_bytes", pa.int64()),
        ("kind", pa.string()),
    ),
    "accuracy": _schema(
        ("cell_id", pa.string()), ("output_name", pa.string()), ("reference", pa.string()), ("n", pa.int64()),
        ("elements", pa.int64()),
        ("max_abs_error", pa.float64()), ("max_rel_error", pa.float64()), ("mean_abs_error", pa.float64()),
        ("mean_rel_error", pa.float64()), ("cosine_similarity", pa.float64()), ("snr_db", pa.float64()),
        ("top1_agreement", pa.float64()), ("top5_agreement", pa.float64()), ("top1_ties", pa.int64()),
        ("tolerance", pa.string()), ("verdict", pa.string()), ("worst_metric", pa.string()),
        ("worst_value", pa.float64()),
    ),
    # one row per LoadGen test of a serving cell (farm.serving.cell): `chosen` marks the cell's answer
    "serving": _schema(
        ("cell_id", pa.string()), ("test", pa.int32()), ("scenario", pa.string()), ("max_delay_ms", pa.float64()),
        ("slo_ms", pa.float64()), ("target_qps", pa.float64()), ("valid", pa.bool_()), ("why_invalid", pa.string()),
        ("chosen", pa.bool_()), ("samples_per_s", pa.float64()), ("scheduled_per_s", pa.float64()),
        ("latency_p50_ms", pa.float64()), ("latency_p90_ms", pa.float64()), ("latency_p95_ms", pa.float64()),
        ("latency_p99_ms", pa.float64()), ("latency_p999_ms", pa.float64()), ("latency_mean_ms", pa.float64()),
        ("latency_max_ms", pa.float64()), ("queries", pa.int64()), ("over_latency_queries", pa.int64()),
        ("early_stopping", pa.string()), ("batch_sizes", pa.string()), ("queue_p50_ms", pa.float64()),
        ("queue_p99_ms", pa.float64()), ("p99_by_second_ms", pa.string()), ("engine_ms", pa.float64()),
        ("engine_p99_ms", pa.float64()),
        ("engine_alone_ms", pa.float64()),
        ("batcher_ms", pa.float64()), ("duration_s", pa.float64()), ("error", pa.string()), ("log_dir", pa.string()),
        ("energy_j", pa.float64()), ("energy_per_query_mj", pa.float64()), ("energy_per_sample_mj", pa.float64()),
        ("power_mean_w", pa.float64()), ("telemetry_note", pa.string()),
    ),
    "devices": _schema(
        ("device_id", pa.string()), ("kind", pa.string()), ("name", pa.string()), ("host", pa.string()),
        ("uuid", pa.string()), ("compute_capability", pa.string()), ("sm_count", pa.int32()),
        ("memory_bytes", pa.int64()), ("memory_bus_width_bits", pa.int32()),
        ("clock_graphics_mhz", pa.int32()), ("clock_memory_mhz", pa.int32()),
        ("driver_version", pa.string()), ("cuda_version", pa.string()), ("cpu_cores", pa.int32()),
        ("os", pa.string()), ("visible_devices", pa.string()),
    ),
}
PER_CELL_TABLES = ("builds", "measurements", "samples", "layers", "accuracy", "serving")  # written before `cells`
TABLES = tuple(SCHEMAS)
KEY_COLUMNS = {"sweeps": ("run_id", "sweep_id"), "devices": ("device_id",)}  # every other table: cell_id
# present and not null in every row written (docs/warehouse.md); every other column may be absent
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "sweeps": ("run_id", "sweep_id"), "cells": ("cell_id", "status"), "builds": ("cell_id",),
    "measurements": ("cell_id",), "samples": ("cell_id", "repeat", "iteration", "latency_ms"),
    "layers": ("cell_id", "layer_index"), "accuracy": ("cell_id", "output_name"), "serving": ("cell_id", "test"),
    "devices": ("device_id",),
}


class RowError(ValueError):
    """Rows that do not fit their table: an unknown column, or a required one missing or null. A
    bug in the code that made the rows, not a user mistake."""


def check_columns(table: str, columns: Iterable[str]) -> None:
    """Raise RowError naming any of `columns` that `table` does not have, and any required column
    missing from them."""
    if table not in SCHEMAS:
        raise RowError(f"no warehouse table {table!r}; tables: {', '.join(TABLES)}")
    names = set(columns)
    unknown = sorted(names - set(SCHEMAS[table].names))
    if unknown:
        raise RowError(f"the {table} table has no column {', '.join(unknown)} (docs/warehouse.md lists its columns)")
    missing = [name for name in REQUIRED_COLUMNS[table] if name not in names]
    if missing:
        raise RowError(f"a {table} row must have {', '.join(missing)}")


def rows_table(table: str, rows: list[dict[str, Any]] | pa.Table) -> pa.Table:
    """`rows` (dicts, or an Arrow table for a large table such as `samples`) as an Arrow table of
    the table's schema, absent optional columns null; RowError where they do not fit."""
    check_columns(table, REQUIRED_COLUMNS.get(table, ()))  # an unknown table
    schema = SCHEMAS[table]
    if isinstance(rows, pa.Table):
        check_columns(table, rows.column_names)
        columns = [rows.column(f.name).cast(f.type) if f.name in rows.column_names
                   else pa.nulls(rows.num_rows, f.type) for f in schema]
        found = pa.table(columns, schema=schema)
    else:
        for row in rows:
            check_columns(table, row)
        found = pa.table({f.name: [row.get(f.name) for row in rows] for f in schema}, schema=schema)
    for name in REQUIRED_COLUMNS[table]:
        if found.column(name).null_count:
            raise RowError(f"a {table} row has no value for {name}")
    return found


def schema_problem(path: Any, table: str) -> str | None:
    """Why a whole Parquet file is not a file of `table`, or None: its footer unreadable, its key
    column missing, a column of a type the table's cannot take, or no other column of the table.
    Columns an older farm wrote under other names, or not at all, are fine. About 0.2 ms a file."""
    try:
        schema = pq.read_schema(path)
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - whatever pyarrow says about the footer
        return f"unreadable footer: {first_line(exc)}"
    found = dict(zip(schema.names, schema.types))
    keys = KEY_COLUMNS.get(table, ("cell_id",))
    missing = [k for k in keys if k not in found]
    if missing:
        return f"wrong schema: no {', '.join(missing)} column, so not a file of the {table} table"
    kinds = _table_kinds(table)
    for name, type_ in found.items():
        if name in kinds and _kind(type_) not in (None, kinds[name]):
            return f"wrong schema: column {name} is {type_}, the {table} table's is {SCHEMAS[table].field(name).type}"
    if not (found.keys() & kinds.keys()) - set(keys):
        return f"wrong schema: no column of the {table} table besides {', '.join(keys)}"
    return None


def cell_mismatch(path: Any) -> str | None:
    """Why a per-cell file's rows are not its own cell's (a file copied over another cell's keeps
    the other's rows under this name: its cell would show twice and this one not at all), from the
    footer's statistics of `cell_id` (no row is read); None where they are, or nothing says."""
    try:
        metadata = pq.read_metadata(path)
        column = metadata.schema.to_arrow_schema().get_field_index("cell_id")
        if column < 0:
            return None
        found = set()
        for group in range(metadata.num_row_groups):
            stats = metadata.row_group(group).column(column).statistics
            if stats is None or not stats.has_min_max:
                return None
            found |= {stats.min, stats.max}
    except Exception:  # noqa: BLE001 - an unreadable footer is found as such elsewhere
        return None
    stem = Path(str(path)).stem
    others = sorted(str(v) for v in found if v != stem)
    if not others:
        return None
    return f"its rows are of cell {others[0][:16]}, not of {stem} (a file copied over another cell's?)"


def samples_problem(path: Any) -> str | None:
    """Why a samples file's latencies cannot be the ones its cells' figures were computed from: a
    value that is no latency (NaN, infinite or negative; a measurement never writes one, so the file
    was altered or damaged after it was written). A comparison judges a cell from the interval
    stored when it was measured without reading these rows; this is where they are read. Reads
    the one column; None where it holds only latencies (or cannot be read: found elsewhere)."""
    import pyarrow.compute as pc

    try:
        latency = pq.read_table(path, columns=["latency_ms"]).column("latency_ms")
    except Exception:  # noqa: BLE001 - no such column, or unreadable: schema_problem / file_problem say
        return None
    valid = pc.and_(pc.is_finite(latency), pc.greater_equal(latency, 0))
    bad = len(latency) - pc.sum(pc.cast(pc.fill_null(valid, True), "int64")).as_py() if len(latency) else 0
    if not bad:
        return None
    return (f"{bad} of {len(latency)} samples are no latency (NaN, infinite or negative): not the samples its "
            "cell's figures were computed from")


@functools.cache
def _table_kinds(table: str) -> dict[str, str | None]:
    return {f.name: _kind(f.type) for f in SCHEMAS[table]}


def _kind(t: pa.DataType) -> str | None:
    """The family a column type belongs to: values cast within a family (None: a null column)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_null(t):
        return None
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "number"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", bool)(t):
        return "string"
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return "time"
    if pa.types.is_list(t) or pa.types.is_large_list(t):  # the item field's name varies by writer
        return f"list<{_kind(t.value_type)}>"
    return str(t)


