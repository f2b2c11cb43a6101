"""`farm history`: each configuration (model, precision, batch, profile, backend and its options,
on one kind of device: farm compare's match) across the sweeps of a warehouse, as a series of
median latencies in the order the sweeps measured them, and the series' change points.

Change points come from Apache Otava (`otava.analysis.compute_change_points`: E-Divisive means
with the Student t-test of Fleming et al., "Hunter", ICPE 2023), the detector MongoDB and DataStax
run over their nightly performance tests: a change point is kept where the runs before and after
it differ with p below MAX_PVALUE and by more than farm compare's minimum effect. Each names the
sweep it starts at, its size, its p-value, and the layers that explain it (the cells on either
side of it, joined as farm compare joins them). docs/results.md says what a series needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.compare.between import configuration_runs, run_key
from farm.compare.layer_changes import LayerExplanation, explain
from farm.compare.load import Side
from farm.compare.stats import MIN_EFFECT_PERCENT, finite
from farm.errors import UserError

MAX_PVALUE = 0.001  # Otava's default: a change point's runs before and after differ at p < 0.001
MIN_RUNS = 6  # fewer runs cannot show a change at that p-value (the t-test needs a few a side)
WINDOW = 50  # Otava's sliding window (runs): a long series is searched in windows of this many
OTAVA_MISSING = ("farm history needs Apache Otava's change-point detection: pip install --no-deps "
                 "'apache-otava==0.8.0' (its own other dependencies serve its BigQuery, Postgres and Slack "
                 "connectors, and it pins an older numpy; farm uses its analysis, which needs numpy and scipy)")


@dataclass
class Point:
    """One sweep's cell of a configuration."""

    sweep: str
    cell_id: str
    measured_at: Any
    median_ms: float
    low_ms: float | None
    high_ms: float | None
    stable: bool | None
    contended: bool | None = None  # timed while other programs used a quarter or more of the CPU time
    taken_percent: float | None = None  # the CPU time they took (their share and the hypervisor's steal)


@dataclass
class ChangePoint:
    """Where a series' latency changed: `index` is the first point after the change."""

    index: int
    sweep: str
    before_ms: float  # the mean median latency of the runs since the previous change point
    after_ms: float  # and up to the next
    pvalue: float
    layers: LayerExplanation | None = None

    @property
    def change(self) -> float:
        """The relative change of the mean latency (+0.12: 12 % slower)."""
        return self.after_ms / self.before_ms - 1


@dataclass
class Series:
    """A configuration on one kind of device across the sweeps, oldest first."""

    label: str
    device: str
    points: list[Point]
    changes: list[ChangePoint] = field(default_factory=list)
    cell: dict[str, Any] = field(default_factory=dict, repr=False)  # one of its cells: the configuration


def history(results: str | Path, sweeps: list[str] | None = None, filters: dict[str, list] | None = None,
            max_pvalue: float = MAX_PVALUE, min_effect_percent: float = MIN_EFFECT_PERCENT,
            explain_layers: bool = True) -> list[Series]:
    """Every configuration of `results` (of `sweeps` only, where given; `filters`: column -> values
    kept, for model, precision, batch, backend) measured ok in at least two sweeps, oldest point
    first, with the change points of those of MIN_RUNS points or more. UserError for a folder
    that is not a warehouse, or without Otava."""
    try:
        from otava.analysis import compute_change_points
    except ImportError:
        raise UserError(OTAVA_MISSING) from None
    from farm.compare.core import cell_labels
    from farm.warehouse import WarehouseReader

    root = Path(results)
    if not root.is_dir():
        raise UserError(f"no warehouse at {root}/: pass --results DIR")
    warehouse = WarehouseReader(root)
    cells = configuration_runs(warehouse, sweeps)
    for column, wanted in (filters or {}).items():
        if wanted:
            cells = [c for c in cells if str(c.get(column)) in {str(w) for w in wanted}]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for cell in cells:
        groups.setdefault(run_key(cell), []).append(cell)
    labels = cell_labels(cells)
    found = []
    for (_, device), members in groups.items():
        if len({c["sweep_id"] for c in members}) < 2:
            continue
        points = [Point(str(c["sweep_id"]), str(c["cell_id"]), c["finished_at"], float(c["latency_median_ms"]),
                        finite(c["median_ci_low_ms"]), finite(c["median_ci_high_ms"]), c["stable"],
                        c.get("contended"), finite(c.get("cpu_taken_percent"))) for c in members]
        series = Series(labels[str(members[0]["cell_id"])], device, points, cell=members[0])
        # runs timed under contention carry other programs' load, which moves a CPU cell tens of
        # percent: they stay in the series, and out of the change points where enough runs were
        # quiet (on a machine always busy, every run counts)
        judged = [i for i, p in enumerate(points) if not p.contended]
        if len(judged) < MIN_RUNS:
            judged = list(range(len(points)))
        if len(judged) >= MIN_RUNS:
            detected, _ = compute_change_points([points[i].median_ms for i in judged], window_len=WINDOW,
                                                max_pvalue=max_pvalue, min_magnitude=min_effect_percent / 100)
            starts = [_first_run_of(points, judged, cp.index, float(cp.stats.mean_1), float(cp.stats.mean_2))
                      for cp in detected]
            series.changes = [ChangePoint(start, points[start].sweep, float(cp.stats.mean_1), float(cp.stats.mean_2),
                                          float(cp.stats.pvalue)) for start, cp in zip(starts, detected)]
        found.append(series)
    if explain_layers:
        _explain(warehouse, found)
    return sorted(found, key=lambda s: (not s.changes, s.label, s.device))


def _first_run_of(points: list[Point], judged: list[int], at: int, before: float, after: float) -> int:
    """The run a change found on the quiet runs (`judged`, the change at judged[at]) starts at: the
    contended runs just before that quiet run belong to the change where they are nearer its new
    level than its old and other programs' share of the CPU cannot explain that (slower by more
    than 1 / (1 - share)^2: farm compare's rule; faster at all, which others' work never makes a
    run): a step whose first runs were timed on a busy evening is named at its first run."""
    start = judged[at]
    previous = judged[at - 1] if at > 0 else -1
    for index in range(start - 1, previous, -1):
        point = points[index]
        median = point.median_ms
        nearer_after = abs(math.log(median / after)) < abs(math.log(median / before))
        share = min((point.taken_percent or 0.0) / 100, 0.9)
        beyond = median > before / (1 - share) ** 2 if after > before else True
        if not (nearer_after and beyond):
            break
        start = index
    return start


def _explain(warehouse: Any, found: list[Series]) -> None:
    """Each change point's layers: the cells just before and at it, joined as farm compare joins
    them (slower: the layers that added the most; faster: those that saved the most)."""
    for series in found:
        backend = series.cell.get("backend")
        for change in series.changes:
            earlier = [p for p in series.points[:change.index] if not p.contended] or series.points[:change.index]
            before, after = earlier[-1], series.points[change.index]
            rows_before = Side(warehouse.root, before.sweep, [], warehouse).layers_of([{"cell_id": before.cell_id}])
            rows_after = Side(warehouse.root, after.sweep, [], warehouse).layers_of([{"cell_id": after.cell_id}])
            a, b = rows_before[before.cell_id], rows_after[after.cell_id]
            change.layers = explain(a, b, backend, backend) if change.change > 0 else explain(b, a, backend, backend)


def change_text(change: ChangePoint) -> str:
    """'at nightly-12: +11.8 % (0.95 → 1.06 ms, p 4e-10)'."""
    percent = f"{100 * change.change:+.1f} %".replace("-", "−")
    return f"at {change.sweep}: {percent} ({change.before_ms:.4g} → {change.after_ms:.4g} ms, p {change.pvalue:.1g})"


def layer_text(change: ChangePoint, top: int = 3) -> list[str]:
    """The layers that explain a change point, a line each (or why there are none)."""
    found = change.layers
    if found is None:
        return []
    if not found.rows:
        return [found.note or "no layer rows"]
    verb = "added" if change.change > 0 else "saved"
    lines = []
    for row in found.rows[:top]:
        name = row["name_new"] or row["name_base"]
        lines.append(f"{name} [{row['type']}]: {verb} {abs(row['added_ms']):.4g} ms a query")
    return lines


__all__ = ["MAX_PVALUE", "MIN_RUNS", "ChangePoint", "Point", "Series", "change_text", "history", "layer_text"]
