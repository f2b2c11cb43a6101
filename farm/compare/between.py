"""How far a configuration's median moves from run to run, from the warehouse's history: each
configuration's runs across its sweeps (farm.queries.CONFIGURATION_RUNS_SQL), the spread of their
log medians. A verdict from two runs' samples alone holds within those runs; the machine's speed
moves between runs (identical host-bound runs on a GPU VM came out 0.64-1.62 of each other), which
only several runs show. farm compare widens each pair's interval by this spread (farm.compare.stats).

The spread is the robust standard deviation of the successive differences of the log medians in
time order (1.4826 x their median absolute value, over sqrt 2): a real change between two runs is
one large difference, which the median passes over, where a plain standard deviation would count
it as noise.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from farm.compare.match import config_key, device_text
from farm.queries import configuration_runs_sql

MIN_RUNS = 4  # runs of a configuration before its spread is estimated (three successive differences)


def configuration_runs(warehouse: Any, sweeps: list[str] | None = None,
                       models: list[str] | None = None) -> list[dict[str, Any]]:
    """Every ok cell with a median of `warehouse` (a WarehouseReader; of `sweeps` and `models` only,
    where given), oldest measurement first, with what makes it a configuration: the runs that
    `run_key` groups (farm.queries.CONFIGURATION_RUNS_SQL)."""
    con = warehouse.connect()
    measured = {d[0] for d in con.execute("SELECT * FROM measurements LIMIT 0").description}
    columns, rows = warehouse.fetch(con, configuration_runs_sql(measured),
                                    [not sweeps, list(sweeps or []), not models, list(models or [])])
    return [dict(zip(columns, row)) for row in rows]


def run_key(cell: dict[str, Any]) -> tuple:
    """A cell's configuration on its kind of device (farm compare's match): its runs share it."""
    return config_key(cell), device_text(cell)


def run_spreads(warehouses: list[Any], models: list[str]) -> dict[tuple, tuple[float, int]]:
    """Per run_key of `models` in `warehouses` (WarehouseReaders, each counted once): (the log-scale
    standard deviation of a run's median about the configuration's level, the runs it is from),
    for those with MIN_RUNS runs or more (a configuration's cells in two warehouses counted once per
    sweep)."""
    runs: dict[tuple, dict[str, tuple[Any, float]]] = {}
    for warehouse in {w.root: w for w in warehouses}.values():
        for cell in configuration_runs(warehouse, models=models):
            runs.setdefault(run_key(cell), {})[str(cell["sweep_id"])] = (cell["finished_at"],
                                                                         float(cell["latency_median_ms"]))
    spreads = {}
    for key, by_sweep in runs.items():
        if len(by_sweep) >= MIN_RUNS:
            ordered = [median for _, median in sorted(by_sweep.values(), key=lambda r: (r[0] is None, r[0]))]
            spreads[key] = (robust_spread(np.log(ordered)), len(ordered))
    return spreads


def robust_spread(log_medians: Any) -> float:
    """The standard deviation of a series' values about its level, from its successive differences:
    1.4826 x median |difference| / sqrt 2 (a normal series' SD; a step between two runs is one
    difference, passed over)."""
    differences = np.abs(np.diff(np.asarray(log_medians, dtype=np.float64)))
    return float(1.4826 * np.median(differences) / math.sqrt(2)) if differences.size else 0.0
