"""How long each cell is expected to take, for the scheduler's longest-first order.

From earlier sweeps where the warehouse has them (farm.sweep reads its `cells`: the median
`duration_s` of the same model, backend, options, precision and batch, in any sweep), else from
a prior: builds before plain runs (a TensorRT engine or torch.compile takes far longer than
eager), larger batches and larger models first. Where some cells have history, the prior of the
others is scaled by how far the prior was off for those (the median ratio), so known and
unknown cells compare in seconds. Only the order matters: a wrong guess costs idle time at the
end of the sweep, never a result.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping
from typing import Any

from farm.records import Cell

HistoryKey = tuple[str, str, str, str, int]  # model_sha256, backend, options (JSON, sorted keys), precision, batch

BASE_S = 5.0  # a small eager cell: load, warm up, time, check accuracy


def history_key(cell: Cell) -> HistoryKey:
    """What a cell is compared on with earlier sweeps' cells (the warehouse's `cells` columns)."""
    return (cell.model.sha256, cell.backend, json.dumps(cell.options, sort_keys=True), cell.precision, cell.batch)


def prior_s(cell: Cell) -> float:
    """A guess, in seconds, for a cell never measured before."""
    from farm.backends.registry import BACKENDS, backend_class

    # builds before plain runs: each backend says how much longer its options make a cell (Backend.build_cost)
    factor = backend_class(cell.backend).build_cost(cell.options) if cell.backend in BACKENDS else 1.0
    if cell.precision == "int8":  # calibration
        factor *= 1.5
    factor *= 1.0 + math.log2(max(1, cell.batch)) / 4  # b128: 2.75x b1
    factor *= 1.0 + (cell.model.size_bytes or 0) / 200e6  # ResNet-50 (100 MB): 1.5x a tiny model
    if cell.unsupported_reason:
        return 0.1  # recorded without running
    return BASE_S * factor


def expected_seconds(cells: list[Cell], history: Mapping[HistoryKey, float]) -> dict[str, float]:
    """Each cell id's expected seconds: its history where there is one, else its scaled prior."""
    known = {c.cell_id: history[history_key(c)] for c in cells if history_key(c) in history}
    ratios = [known[c.cell_id] / prior_s(c) for c in cells if c.cell_id in known and prior_s(c) > 0]
    scale = statistics.median(ratios) if ratios else 1.0
    return {c.cell_id: known.get(c.cell_id, prior_s(c) * scale) for c in cells}


def history_from_rows(rows: list[tuple[Any, ...]]) -> dict[HistoryKey, float]:
    """(model_sha256, backend, options, precision, batch, seconds) rows, as the history mapping."""
    return {(str(m), str(b), str(o), str(p), int(n)): float(s) for m, b, o, p, n, s in rows
            if s is not None and n is not None and not math.isnan(s)}
