"""What `farm sweep` prints when it ends: the table of every planned cell, as the warehouse now
holds it (one query with `farm show`'s: farm.queries.sweep_cells), and the failed cells' list."""

from __future__ import annotations

from farm.display import backend_labels, cell_labels, footnoted, stable_text
from farm.queries import baseline_positions, speedup, sweep_cells
from farm.sweep import SweepOutcome
from farm.warehouse import Warehouse

SUMMARY_COLUMNS = ("cell", "model", "precision", "batch", "profile", "backend", "status", "qps",
                   "samples/s", "p50 ms", "p99 ms", "stable", "speedup", "accuracy", "note")
RESUMED_NOTE = "(resumed) measured by an earlier run of this sweep: --force measures it again"
# left out, first first, where the terminal is too narrow for the whole table (`farm show` has them)
SUMMARY_DROP_ORDER = ("qps", "p99 ms", "stable", "profile", "samples/s", "cell")


def summary_table(warehouse: Warehouse, outcome: SweepOutcome) -> tuple[list[str], list[list], list[str]]:
    """The end-of-sweep table's columns and rows (one per planned cell, from what the warehouse now
    holds) and its footnotes: each distinct reason or note is printed once below the table, not per
    row. Speedup (farm.queries.speedup) is over the fp32 cell of the same model, batch, profile,
    backend and options, in this plan, marked by farm compare's verdict on the two median latencies
    (farm.display.speedup_text): a ratio inside the noise does not look like a result."""
    ids = [c.cell_id for c in outcome.cells]
    order = {cell_id: i for i, cell_id in enumerate(ids)}
    # a throttled cell says so in its note (farm.queries.THROTTLED_NOTE)
    rows = sorted(sweep_cells(warehouse, warehouse.connect(), outcome.sweep, ids, throttled_note=True),
                  key=lambda r: order[r["cell_id"]])
    labels = backend_labels(outcome.cells)
    same = [(r["model"], r["batch"], r["profile"], r["backend"], r["options"], r["scenario"]) for r in rows]
    bases = baseline_positions(same, [r["precision"] == "fp32" and r["qps"] is not None for r in rows])
    table_rows = []
    for r, base in zip(rows, bases):
        if r["run_id"] != outcome.run_id and r["status"] != "unsupported":  # taken from an earlier run, not now
            r["note"] = [RESUMED_NOTE, *r["note"]]
        table_rows.append((r["cell_id"][:8], r["model"],
                           r["precision"], r["batch"], r["profile"], labels.get(r["cell_id"], r["backend"]), r["status"],
                           r["qps"], r["samples_per_s"], r["p50"], r["p99"], stable_text(r["stable"], r["spread"]),
                           _speedup(r, rows[base]) if base is not None and rows[base] is not r else
                           "base" if base is not None else None, r["accuracy"], r["note"]))
    table_rows, notes = footnoted(table_rows, len(SUMMARY_COLUMNS) - 1)
    columns = list(SUMMARY_COLUMNS)
    if not any(row[4] for row in table_rows):  # no cell has a profile: no column for it
        columns.pop(4)
        table_rows = [row[:4] + row[5:] for row in table_rows]
    return columns, [list(row) for row in table_rows], notes


def _speedup(row: dict, base: dict) -> str | None:
    from farm.compare.stats import MedianInterval, effect_interval
    from farm.display import speedup_text

    ratio = speedup(row["qps"], base["qps"])
    if ratio is None:
        return None
    sides = [MedianInterval(*(float("nan") if r[k] is None else float(r[k]) for k in ("p50", "low", "high")), "stored")
             for r in (base, row)]
    return speedup_text(ratio, effect_interval(*sides).verdict)


def failed_cells(outcome: SweepOutcome) -> list[tuple[str, str]]:
    """(label, reason) of the outcome's failed cells, each labelled with the options that tell it
    apart from the sweep's other cells (farm.display.cell_labels), in the plan's order."""
    labels = cell_labels(outcome.cells)
    return [(labels[cell.cell_id], outcome.failed[cell.cell_id]) for cell in outcome.cells if cell.cell_id in outcome.failed]
