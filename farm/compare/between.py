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
from pathlib import Path
from typing import Any

import numpy as np

from farm.compare.match import config_key, device_text
from farm.queries import CONFIGURATION_RUNS_SQL

MIN_RUNS = 4  # runs of a configuration before its spread is estimated (three successive differences)


def run_spreads(roots: list[Path], models: list[str]) -> dict[tuple, tuple[float, int]]:
    """Per (configuration, device) of `models` in the warehouses at `roots`: (the log-scale
    standard deviation of a run's median about the configuration's level, the runs it is from),
    for those with MIN_RUNS runs or more (a configuration's cells in two warehouses counted once per
    sweep)."""
    from farm.warehouse import WarehouseReader

    runs: dict[tuple, dict[str, tuple[Any, float]]] = {}
    for root in dict.fromkeys(roots):
        warehouse = WarehouseReader(root)
        columns, rows = warehouse.fetch(warehouse.connect(), CONFIGURATION_RUNS_SQL, [True, [], False, models])
        for row in rows:
            cell = dict(zip(columns, row))
            key = (config_key(cell), device_text(cell))
            runs.setdefault(key, {})[str(cell["sweep_id"])] = (cell["finished_at"], float(cell["latency_median_ms"]))
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
