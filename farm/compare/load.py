"""One side of a comparison: a sweep's cells with their figures, and each cell's raw samples and
layer rows, read from a warehouse (its DuckDB views and per-cell files; damaged files are left out
with a warning, as every reader does)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from farm.compare.stats import MedianInterval, median_interval
from farm.errors import UserError
from farm.queries import CELL_VERDICTS, CELLS_WITH_FIGURES

# measurements' columns a comparison reads (NULL where a warehouse's files have none of them)
MEASURED = ("throughput_qps", "throughput_samples_per_s", "latency_median_ms", "latency_p99_ms", "median_ci_low_ms",
            "median_ci_high_ms", "queries", "repeats", "compute_median_ms", "layer_coverage_percent",
            "energy_per_sample_mj", "energy_per_query_mj", "latency_includes_transfers", "timing_cuda_graph",
            "timing_spin_wait", "timing_streams", "throttled")
CELL_COLUMNS = ("cell_id", "sweep_id", "model", "model_sha256", "precision", "batch", "profile", "backend", "options",
                "status", "reason", "device_id")


@dataclass
class Side:
    """A sweep in a warehouse, as one side (BASE or NEW) of a comparison."""

    results: Path
    sweep: str
    cells: list[dict[str, Any]]
    warehouse: Any = field(repr=False, default=None)

    def interval(self, cell: dict[str, Any]) -> MedianInterval | None:
        """The cell's median latency and its 95 % interval from its raw samples; the stored
        interval where it has no samples (an ingested trtexec summary); None without either."""
        found = self.warehouse.cell_rows(self.sweep, "samples", cell["cell_id"], ["latency_ms", "repeat"])
        if found is not None and found.num_rows:
            latency = found.column("latency_ms").to_numpy(zero_copy_only=False).astype(np.float64)
            repeat = found.column("repeat").fill_null(0).to_numpy(zero_copy_only=False)
            computed = median_interval(latency, repeat)
            if computed is not None:
                return computed
        median, low, high = (cell.get(k) for k in ("latency_median_ms", "median_ci_low_ms", "median_ci_high_ms"))
        if median is None or (isinstance(median, float) and math.isnan(median)):
            return None
        return MedianInterval(float(median), _float(low), _float(high), "stored", int(cell.get("queries") or 0),
                              int(cell.get("repeats") or 0))

    def layers(self, cell: dict[str, Any]) -> list[dict[str, Any]]:
        """The cell's layer rows (name, type, kind, times), in execution order."""
        found = self.warehouse.cell_rows(self.sweep, "layers", cell["cell_id"])
        if found is None:
            return []
        wanted = ("layer_index", "name", "type", "kind", "time_avg_ms", "time_median_ms")
        rows = [{k: row.get(k) for k in wanted} for row in found.to_pylist()]
        return sorted(rows, key=lambda r: (r["layer_index"] is None, r["layer_index"] or 0))


def _float(value: Any) -> float:
    return math.nan if value is None else float(value)


def load_side(results: str | Path, sweep: str, flag: str = "--results") -> Side:
    """The cells of `sweep`'s latest plan (every cell where no run recorded its plan) with their
    figures; UserError naming the sweeps there when it has none of that name."""
    from farm.warehouse import Warehouse

    root = Path(results)
    if not root.is_dir():
        raise UserError(f"no warehouse at {root}/: pass {flag} DIR naming the folder that holds sweep {sweep!r}")
    warehouse = Warehouse(root)
    sweeps = warehouse.sweeps()
    if sweep not in sweeps:
        raise UserError(f"no sweep {sweep!r} in {root}/ (sweeps there: {', '.join(sweeps) or 'none'}); "
                        f"`farm ls --results {root}` lists them, {flag} DIR picks another warehouse")
    con = warehouse.connect()
    measured = {d[0] for d in con.execute("SELECT * FROM measurements LIMIT 0").description}
    figures = [f"m.{c}" if c in measured else f"NULL AS {c}" for c in MEASURED]
    select = ", ".join([*(f"c.{c}" for c in CELL_COLUMNS), "d.kind AS device_kind", "d.name AS device_name",
                        *figures, "v.verdict AS accuracy_verdict", "v.failed_metric", "v.cosine_similarity",
                        "v.top1_agreement", "v.max_abs_error"])
    plan = warehouse.latest_plan(sweep)
    sql = (f"WITH {CELL_VERDICTS}\nSELECT {select}\nFROM {CELLS_WITH_FIGURES}\n"
           "WHERE c.sweep_id = ? AND (? OR list_contains(?, c.cell_id)) ORDER BY c.cell_id")
    columns, rows = warehouse.fetch(con, sql, [sweep, plan is None, plan or []])
    con.close()
    return Side(root, sweep, [dict(zip(columns, row)) for row in rows], warehouse)
