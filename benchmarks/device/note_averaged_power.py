"""Say on warehouse rows measured before farm sampled instant power that their power_max_w is
NVML's 1 s average (NOTE appended to telemetry_note); no figure changes.

Until farm.telemetry read NVML_FI_DEV_POWER_INSTANT, its power samples were
nvmlDeviceGetPowerUsage, which on an H200 is a 1 s average: in examples/results 32 of 208 rows
have a power_max_w below their power_mean_w. This marks every row with telemetry samples whose
note does not already say so; each file is rewritten atomically. Rows measured since need nothing.

    python benchmarks/device/note_averaged_power.py examples/results
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from farm.warehouse import write_parquet

NOTE = ("measured before farm read instant power: power_max_w is the maximum of NVML's power usage, a 1 s "
        "average on recent GPUs, which lags and understates short peaks")


def mark(table: pa.Table) -> tuple[pa.Table, int]:
    """`table` with NOTE appended to the note of every row that has telemetry samples and no such
    note yet; and how many rows changed."""
    if "telemetry_samples" not in table.column_names:
        return table, 0
    notes = table.column("telemetry_note").to_pylist()
    sampled = pc.fill_null(pc.greater(table.column("telemetry_samples"), 0), False).to_pylist()
    changed = 0
    for i, (note, has) in enumerate(zip(notes, sampled)):
        if has and NOTE not in (note or ""):
            notes[i] = f"{note}; {NOTE}" if note else NOTE
            changed += 1
    index = table.column_names.index("telemetry_note")
    return table.set_column(index, table.field(index), pa.array(notes, table.field(index).type)), changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path)
    args = parser.parse_args()
    total = files = 0
    for path in sorted(args.results.glob("*/measurements/*.parquet")):
        table, changed = mark(pq.read_table(path))
        if changed:
            write_parquet(table, path)
            total, files = total + changed, files + 1
    print(f"{total} row(s) in {files} file(s) marked")


if __name__ == "__main__":
    main()
