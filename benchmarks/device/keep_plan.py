"""After a subset of a sweep's cells was measured again (a narrower sweep file of the same name,
`farm sweep --force`): the sweep is still the full one. A run's `planned_cell_ids` is what the
sweep is taken to be (farm.warehouse.views.latest_plan), so the subset run's list is set to null
(its row, command and counts stay: it says what was run) where an earlier run planned more cells.

    python3 benchmarks/device/keep_plan.py RESULTS_DIR SWEEP       # resume_examples.sh runs this
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def keep_plan(results: Path, sweep: str) -> str | None:
    """Null the latest run's planned cell ids when an earlier run planned a superset; its file name."""
    runs = []
    for path in sorted((results / sweep / "sweeps").glob("*.parquet")):
        for row in pq.read_table(path, columns=["started_at", "planned_cell_ids"]).to_pylist():
            if row["planned_cell_ids"] is not None:
                runs.append((row["started_at"], set(row["planned_cell_ids"]), path))
    if len(runs) < 2:
        return None
    runs.sort(key=lambda r: r[0])
    (_, latest, path), earlier = runs[-1], runs[:-1]
    if not any(latest < planned for _, planned, _ in earlier):
        return None
    table = pq.read_table(path)
    index = table.column_names.index("planned_cell_ids")
    field = table.schema.field(index)
    table = table.set_column(index, field, pa.nulls(table.num_rows, field.type))
    temporary = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, temporary)
    temporary.replace(path)
    return path.name


if __name__ == "__main__":
    done = keep_plan(Path(sys.argv[1]), sys.argv[2])
    print(f"{sys.argv[2]}: {'the subset run ' + done + ' no longer narrows the plan' if done else 'plan unchanged'}")
