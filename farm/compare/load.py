"""One side of a comparison: a sweep's cells with their figures, and each cell's raw samples and
layer rows, read from a warehouse (its DuckDB views and per-cell files; damaged files are left out
with a warning, as every reader does)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from farm.compare.stats import MedianInterval
from farm.errors import UserError
from farm.queries import CELL_VERDICTS, CELLS_WITH_FIGURES, cells_column

# measurements' columns a comparison reads (NULL where a warehouse's files have none of them)
MEASURED = ("throughput_qps", "throughput_samples_per_s", "latency_median_ms", "latency_p99_ms", "median_ci_low_ms",
            "median_ci_high_ms", "queries", "repeats", "compute_median_ms", "layer_coverage_percent",
            "energy_per_sample_mj", "energy_per_query_mj", "latency_includes_transfers", "timing_cuda_graph",
            "timing_spin_wait", "timing_streams", "throttled", "median_ci_method", "enqueue_median_ms",
            "host_probe_median_ms", "cpu_others_percent", "cpu_steal_percent")
CELL_COLUMNS = ("cell_id", "sweep_id", "model", "model_sha256", "precision", "batch", "profile", "backend", "options",
                "status", "reason", "device_id", "worker")


@dataclass
class Side:
    """A sweep in a warehouse, as one side (BASE or NEW) of a comparison."""

    results: Path
    sweep: str
    cells: list[dict[str, Any]]
    warehouse: Any = field(repr=False, default=None)

    def intervals(self, cells: list[dict[str, Any]]) -> dict[str, MedianInterval | None]:
        """Per cell id: its median latency and 95 % interval from its raw samples: the interval this
        farm stored when it measured the cell (`median_ci_method` = SAMPLE_INTERVAL_METHOD: the same
        function over the same samples, as the dashboard's Compare page takes it), else computed
        from the samples (read for those cells in one query, computed together:
        farm.compare.intervals); the stored interval where a cell has no samples (an ingested
        trtexec summary); None without either."""
        from farm.compare.intervals import median_intervals
        from farm.measure import SAMPLE_INTERVAL_METHOD

        computed: dict[str, MedianInterval | None] = {}
        ids = []
        for cell in cells:
            cell_id = str(cell["cell_id"])
            if cell.get("median_ci_method") == SAMPLE_INTERVAL_METHOD and (stored := _stored(cell, "samples")):
                computed[cell_id] = stored
            elif cell_id not in computed:
                ids.append(cell_id)
        ids = list(dict.fromkeys(ids))
        found = self.warehouse.rows_of_cells(self.sweep, "samples", ids, ["latency_ms", "repeat"],
                                             numbered=True) if ids else None
        if found is not None and found.num_rows:  # rows numbered by the cell's place in `ids`, in that order
            group = found.column("cell_number").to_numpy(zero_copy_only=False).astype(np.int64)
            latency = found.column("latency_ms").to_numpy(zero_copy_only=False).astype(np.float64)
            repeat = found.column("repeat").fill_null(0).to_numpy(zero_copy_only=False)
            computed.update(zip(ids, median_intervals(group, repeat, latency, len(ids))))
        return {str(c["cell_id"]): computed.get(str(c["cell_id"])) or _stored(c) for c in cells}

    def layers_of(self, cells: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
        """Per cell id: its layer rows (name, type, kind, times), in execution order (one query)."""
        wanted = ["layer_index", "name", "type", "kind", "time_avg_ms", "time_median_ms"]
        found = self.warehouse.rows_of_cells(self.sweep, "layers", [str(c["cell_id"]) for c in cells],
                                             wanted, optional=("kind", "time_median_ms"))
        rows: dict[str, list[dict[str, Any]]] = {str(c["cell_id"]): [] for c in cells}
        for row in found.to_pylist() if found is not None else []:
            rows[row.pop("cell_id")].append(row)
        return {cell: sorted(found_rows, key=lambda r: (r["layer_index"] is None, r["layer_index"] or 0))
                for cell, found_rows in rows.items()}


def _stored(cell: dict[str, Any], basis: str = "stored") -> MedianInterval | None:
    """The measurements row's interval; with basis 'samples' (one this farm computed from the
    samples) only where all three figures are there."""
    median, low, high = (cell.get(k) for k in ("latency_median_ms", "median_ci_low_ms", "median_ci_high_ms"))
    if median is None or (isinstance(median, float) and math.isnan(median)):
        return None
    if basis == "samples" and not all(v is not None and math.isfinite(v) for v in (low, high)):
        return None
    return MedianInterval(float(median), _float(low), _float(high), basis, int(cell.get("queries") or 0),
                          int(cell.get("repeats") or 0))


def _float(value: Any) -> float:
    return math.nan if value is None else float(value)


def load_side(results: str | Path, sweep: str, flag: str = "--results") -> Side:
    """The cells of `sweep`'s latest plan (every cell where no run recorded its plan) with their
    figures; UserError naming the sweeps there when it has none of that name."""
    from farm.warehouse import WarehouseReader

    root = Path(results)
    if not root.is_dir():
        raise UserError(f"no warehouse at {root}/: pass {flag} DIR naming the folder that holds sweep {sweep!r}")
    warehouse = WarehouseReader(root)
    sweeps = warehouse.sweeps()
    if sweep not in sweeps:
        raise UserError(f"no sweep {sweep!r} in {root}/ (sweeps there: {', '.join(sweeps) or 'none'}); "
                        f"`farm ls --results {root}` lists them, {flag} DIR picks another warehouse")
    con = _sweep_tables(warehouse, sweep)
    figures = [f"m.{c}" for c in MEASURED]
    select = ", ".join([*(f"c.{c}" for c in CELL_COLUMNS), cells_column(con, "scenario"),
                        "d.kind AS device_kind", "d.name AS device_name",
                        *figures, "v.verdict AS accuracy_verdict", "v.failed_metric", "v.cosine_similarity",
                        "v.top1_agreement", "v.max_abs_error"])
    plan = warehouse.latest_plan(sweep)
    sql = (f"WITH {CELL_VERDICTS}\nSELECT {select}\nFROM {CELLS_WITH_FIGURES}\n"
           "WHERE c.sweep_id = ? AND (? OR list_contains(?, c.cell_id)) ORDER BY c.cell_id")
    columns, rows = warehouse.fetch(con, sql, [sweep, plan is None, plan or []])
    con.close()
    return Side(root, sweep, [dict(zip(columns, row)) for row in rows], warehouse)


def _sweep_tables(warehouse: Any, sweep: str) -> Any:
    """An in-memory DuckDB holding the small tables of one sweep (the current schema's columns,
    NULL where its files are older), read through the warehouse's consolidated copy: the other
    sweeps' files are never opened."""
    import duckdb

    from farm.warehouse.consolidated import create_table, load_sweep_table

    con = duckdb.connect(":memory:")
    for table in ("cells", "measurements", "builds", "accuracy", "devices"):
        create_table(con, table, table)
        if table != "builds":  # joined by CELLS_WITH_FIGURES, none of its columns read: left empty
            load_sweep_table(con, warehouse, sweep, table, table)
    con.execute("CREATE OR REPLACE TABLE devices AS SELECT DISTINCT ON (device_id) * FROM devices")
    return con
