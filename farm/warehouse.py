"""The warehouse: the only place results live.

Layout: `<root>/<sweep>/<table>/<key>.parquet`, one file per cell per table (per run for
`sweeps`, per device for `devices`), each written to a temporary name and renamed into place,
so a crash loses at most the cell in flight and never leaves half a file. A cell's `cells` file
is written last: a cell counts as done only once it exists, and `repair` removes what a killed
run left of a cell without it. DuckDB reads the files through one view per table.

Every column is listed with its unit in docs/warehouse.md (a test checks that).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    import duckdb

    from farm.plan import Cell
    from farm.worker import CellResult

SCHEMA_VERSION = 1
CACHE_DIR_NAME = ".cache"
KEPT_STATUSES = frozenset({"ok", "unsupported"})  # a rerun redoes failed and skipped cells

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
        ("started_at", _ts), ("finished_at", _ts),
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
        ("ingested_on", pa.string()),
    ),
    "builds": _schema(
        ("cell_id", pa.string()), ("build_s", pa.float64()),
        ("artifact_bytes", pa.int64()), ("cache_hits", pa.int64()), ("builder_peak_memory_bytes", pa.int64()),
        ("layers_before_fusion", pa.int32()), ("layers_after_fusion", pa.int32()),
        ("layers_with_reformats", pa.int32()), ("builder_peak_host_memory_bytes", pa.int64()),
        ("engine_host_persistent_bytes", pa.int64()), ("engine_device_persistent_bytes", pa.int64()),
        ("engine_scratch_bytes", pa.int64()), ("precision_transform_s", pa.float64()),
        ("precision_transform_cached", pa.bool_()), ("calibration", pa.string()),
    ),
    "measurements": _schema(
        ("cell_id", pa.string()), ("queries", pa.int64()),
        ("throughput_qps", pa.float64()), ("throughput_samples_per_s", pa.float64()),
        *[(f"latency_{s}_ms", pa.float64()) for s in ("min", "mean", "median", "p90", "p95", "p99", "max", "std")],
        ("latency_cv_percent", pa.float64()),
        *[(f"{p}_{s}_ms", pa.float64()) for p in ("enqueue", "h2d", "compute", "d2h") for s in ("mean", "median")],
        ("compute_p99_ms", pa.float64()), ("host_walltime_ms", pa.float64()), ("repeats", pa.int32()),
        ("warmup_queries", pa.int32()), ("warmup_ms", pa.float64()),
        ("median_ci_low_ms", pa.float64()), ("median_ci_high_ms", pa.float64()), ("median_ci_method", pa.string()),
        ("repeat_spread_percent", pa.float64()), ("stable", pa.bool_()), ("max_cv_percent", pa.float64()),
        ("peak_memory_bytes", pa.int64()),
    ),
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
    ),
    "accuracy": _schema(
        ("cell_id", pa.string()), ("output_name", pa.string()), ("reference", pa.string()), ("elements", pa.int64()),
        ("max_abs_error", pa.float64()), ("max_rel_error", pa.float64()), ("mean_abs_error", pa.float64()),
        ("cosine_similarity", pa.float64()), ("top1_agreement", pa.float64()), ("top5_agreement", pa.float64()),
        ("tolerance", pa.string()), ("verdict", pa.string()), ("worst_metric", pa.string()),
        ("worst_value", pa.float64()),
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
PER_CELL_TABLES = ("builds", "measurements", "samples", "layers", "accuracy")  # written before `cells`
_ENGINE_MEMORY = ("host_persistent_bytes", "device_persistent_bytes", "scratch_bytes")  # builds: engine_*
TABLES = tuple(SCHEMAS)


class Warehouse:
    """A results folder: writes cell results atomically and opens DuckDB over them."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @property
    def cache_dir(self) -> Path:
        """Zoo models, work folders and (later) engine and timing caches."""
        return self.root / CACHE_DIR_NAME

    def table_dir(self, sweep: str, table: str) -> Path:
        return self.root / sweep / table

    # --- resume ---------------------------------------------------------------------------------

    def repair(self, sweep: str) -> list[Path]:
        """Remove temporary files and rows of cells that a killed run left unfinished."""
        removed = []
        sweep_dir = self.root / sweep
        if not sweep_dir.is_dir():
            return removed
        for tmp in sweep_dir.glob("*/.*.tmp"):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
        finished = {p.stem for p in self.table_dir(sweep, "cells").glob("*.parquet")}
        for table in PER_CELL_TABLES:
            for path in self.table_dir(sweep, table).glob("*.parquet"):
                if path.stem not in finished:
                    path.unlink(missing_ok=True)
                    removed.append(path)
        return removed

    def cell_statuses(self, sweep: str) -> dict[str, str]:
        """Status of every finished cell of a sweep, by cell id."""
        files = sorted(self.table_dir(sweep, "cells").glob("*.parquet"))
        if not files:
            return {}
        table = pq.read_table(files, columns=["cell_id", "status"]) if len(files) > 1 else \
            pq.read_table(files[0], columns=["cell_id", "status"])
        return dict(zip(table.column("cell_id").to_pylist(), table.column("status").to_pylist()))

    # --- writing --------------------------------------------------------------------------------

    def write_sweep_run(self, row: dict[str, Any]) -> None:
        self._write("sweeps", row["sweep_id"], row["run_id"], [row])

    def write_cell(self, cell: Cell, result: CellResult, run_id: str, config_hash: str) -> None:
        """Write every table of one cell; the `cells` row goes last, marking the cell done."""
        sweep = cell.sweep
        # A rerun replaces a cell: un-mark it done first, so a kill in between leaves no done cell
        # with missing or stale rows (repair then removes the leftovers).
        for table in ("cells", *PER_CELL_TABLES):
            self.table_dir(sweep, table).joinpath(f"{cell.cell_id}.parquet").unlink(missing_ok=True)
        if result.build is not None and result.status == "ok":
            build = {("engine_" + k if k in _ENGINE_MEMORY else k): v for k, v in vars(result.build).items()}
            self._write("builds", sweep, cell.cell_id, [{"cell_id": cell.cell_id, **build}])
        if result.measurement is not None and result.status == "ok":
            self._write("measurements", sweep, cell.cell_id, [{"cell_id": cell.cell_id, **result.measurement}])
        if result.samples is not None and result.status == "ok":
            self._write_table("samples", sweep, cell.cell_id, _samples_table(cell, result))
        if result.accuracy and result.status == "ok":
            self._write("accuracy", sweep, cell.cell_id, [{"cell_id": cell.cell_id, **row} for row in result.accuracy])
        if result.layers and result.status == "ok":
            self._write("layers", sweep, cell.cell_id, _layer_rows(cell, result))
        if result.device is not None:
            self._write("devices", sweep, result.device["device_id"], [result.device])
        self._write("cells", sweep, cell.cell_id, [_cell_row(cell, result, run_id, config_hash)])

    def _write(self, table: str, sweep: str, key: str, rows: list[dict[str, Any]]) -> None:
        schema = SCHEMAS[table]
        columns = {f.name: [r.get(f.name) for r in rows] for f in schema}
        self._write_table(table, sweep, key, pa.table(columns, schema=schema))

    def _write_table(self, table_name: str, sweep: str, key: str, table: pa.Table) -> None:
        directory = self.table_dir(sweep, table_name)
        directory.mkdir(parents=True, exist_ok=True)
        table = table.replace_schema_metadata({"farm.schema_version": str(SCHEMA_VERSION)})
        write_atomic(table, directory / f"{key}.parquet")

    # --- reading --------------------------------------------------------------------------------

    def sweeps(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir()
                      if p.is_dir() and not p.name.startswith(".") and (p / "cells").is_dir())

    def connect(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB with one view per table over the warehouse's Parquet files."""
        import duckdb

        con = duckdb.connect(":memory:")
        self.create_views(con)
        return con

    def table_globs(self, table: str) -> list[str]:
        """One glob per sweep that has files of `table`: views list them so that DuckDB never has
        to list the warehouse's root (the SQL console allows reading those folders only)."""
        root = self.root.resolve()
        if not root.is_dir():
            return []
        folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
        return [str(folder / table / "*.parquet") for folder in folders if any((folder / table).glob("*.parquet"))]

    def create_views(self, con: duckdb.DuckDBPyConnection) -> None:
        """Create one view per table in `con`; an empty typed view where the table has no file."""
        for table, schema in SCHEMAS.items():
            globs = self.table_globs(table)
            if globs:
                files = ", ".join(f"'{sql_string(g)}'" for g in globs)
                source = f"read_parquet([{files}], union_by_name = true)"
                if table == "devices":  # one file per sweep that used the device
                    con.execute(f"CREATE VIEW devices AS SELECT DISTINCT ON (device_id) * FROM {source}")
                    continue
                con.execute(f"CREATE VIEW {table} AS SELECT * FROM {source}")
            else:
                con.register(f"_empty_{table}", schema.empty_table())
                con.execute(f"CREATE VIEW {table} AS SELECT * FROM _empty_{table}")


def write_atomic(table: pa.Table, path: Path) -> None:
    """Write a Parquet file under a temporary name, flush it to disk, then rename it into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def sql_string(text: str) -> str:
    """`text` escaped for use inside a single-quoted SQL literal."""
    return text.replace("'", "''")


def _cell_row(cell: Cell, result: CellResult, run_id: str, config_hash: str) -> dict[str, Any]:
    duration = (result.finished_at - result.started_at).total_seconds() \
        if result.started_at and result.finished_at else None
    return {
        "cell_id": cell.cell_id, "sweep_id": cell.sweep, "run_id": run_id,
        "model": cell.model.name, "model_source": cell.model.source, "model_sha256": cell.model.sha256,
        "model_bytes": cell.model.size_bytes, "precision": cell.precision, "batch": cell.batch,
        "profile": cell.profile.name if cell.profile else None,
        "profile_ranges": cell.profile.describe() if cell.profile else None,
        "backend": cell.backend, "options": json.dumps(cell.options, sort_keys=True),
        "shapes": json.dumps({k: list(v) for k, v in cell.input_shapes.items()}),
        "status": result.status, "reason": result.reason, "traceback": result.traceback, "notes": cell.notes,
        "device_id": result.device["device_id"] if result.device else None,
        "worker": _describe_worker(result.worker),
        "host": result.host.get("host"), "cpu_model": result.host.get("cpu_model"),
        "cpu_cores": result.host.get("cpu_cores"), "versions": json.dumps(result.versions, sort_keys=True),
        "farm_version": result.versions.get("farm"), "farm_commit": result.farm_commit,
        "config_hash": config_hash, "started_at": result.started_at, "finished_at": result.finished_at,
        "duration_s": duration,
    }


def _describe_worker(worker: dict[str, Any] | None) -> str | None:
    if not worker:
        return None
    text = f"{worker.get('kind', '?')} worker pid {worker.get('pid')} on {worker.get('host')}"
    if worker.get("kind") == "cuda":
        text += f", Ray GPU {','.join(worker.get('gpu_ids') or []) or '?'}, " \
                f"CUDA_VISIBLE_DEVICES={worker.get('visible_devices')}"
    return text


def _samples_table(cell: Cell, result: CellResult) -> pa.Table:
    s = result.samples
    n = len(s)
    iteration = np.empty(n, dtype=np.int32)
    for r in np.unique(s.repeat):  # iteration counts within each repeat
        mask = s.repeat == r
        iteration[mask] = np.arange(mask.sum(), dtype=np.int32)

    def optional(values: np.ndarray | None) -> pa.Array:
        return pa.nulls(n, pa.float64()) if values is None else pa.array(values, pa.float64(), from_pandas=True)

    return pa.table({
        "cell_id": pa.array([cell.cell_id] * n, pa.string()),
        "repeat": pa.array(s.repeat, pa.int32()),
        "iteration": pa.array(iteration, pa.int32()),
        "start_ms": pa.array(s.start_ms, pa.float64()),
        "latency_ms": pa.array(s.latency_ms, pa.float64()),
        "enqueue_ms": optional(s.enqueue_ms), "h2d_ms": optional(s.h2d_ms),
        "compute_ms": optional(s.compute_ms), "d2h_ms": optional(s.d2h_ms),
    }, schema=SCHEMAS["samples"])


def _shapes(shapes: Iterable[list[int] | None]) -> str:
    return ", ".join("?" if s is None else "x".join(str(d) for d in s) or "scalar" for s in shapes)


def _layer_rows(cell: Cell, result: CellResult) -> list[dict[str, Any]]:
    from farm.layers.memory import total_bytes

    averages = [layer.time_avg_ms if layer.time_avg_ms is not None else
                float(np.mean(layer.times_ms)) if layer.times_ms else None for layer in result.layers]
    total_time = sum(a for a in averages if a is not None)
    rows = []
    for layer, avg in zip(result.layers, averages):
        median = layer.time_median_ms if layer.time_median_ms is not None else \
            float(np.median(layer.times_ms)) if layer.times_ms else None
        share = layer.time_share_percent if layer.time_share_percent is not None else \
            100.0 * avg / total_time if avg is not None and total_time > 0 else None
        rows.append({
            "cell_id": cell.cell_id, "layer_index": layer.index, "name": layer.name, "type": layer.type,
            "fused_ops": layer.fused_ops, "tactic": layer.tactic,
            "input_tensors": json.dumps(layer.input_tensors), "output_tensors": json.dumps(layer.output_tensors),
            "input_shapes": _shapes(layer.input_shapes), "input_dtypes": ", ".join(layer.input_dtypes),
            "output_shapes": _shapes(layer.output_shapes), "output_dtypes": ", ".join(layer.output_dtypes),
            "input_bytes": layer.input_bytes, "weight_bytes": layer.weight_bytes, "output_bytes": layer.output_bytes,
            "total_bytes": total_bytes([layer.input_bytes, layer.weight_bytes, layer.output_bytes]),
            "macs": layer.macs, "calls": layer.calls if layer.calls is not None else len(layer.times_ms),
            "time_avg_ms": avg, "time_median_ms": median, "time_share_percent": share,
            "host_persistent_bytes": layer.host_persistent_bytes,
            "device_persistent_bytes": layer.device_persistent_bytes, "scratch_bytes": layer.scratch_bytes,
        })
    return rows
