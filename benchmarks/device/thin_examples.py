"""Copy a warehouse for committing as an example, keeping at most N raw samples per cell.

Every k-th query of each cell is kept (iteration numbers unchanged), enough for the latency
histograms; the `measurements` rows, computed from every query, are copied as they are.

    python benchmarks/device/thin_examples.py SRC DST [--max-samples 500]
"""

from __future__ import annotations

import argparse
import math
import shutil
from pathlib import Path

import pyarrow.parquet as pq

from farm.warehouse import write_parquet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", type=Path)
    parser.add_argument("dst", type=Path)
    parser.add_argument("--max-samples", type=int, default=500)
    args = parser.parse_args()
    for path in sorted(args.src.rglob("*.parquet")):
        target = args.dst / path.relative_to(args.src)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.parent.name != "samples":
            shutil.copy2(path, target)
            continue
        table = pq.read_table(path)
        step = max(1, math.ceil(table.num_rows / args.max_samples))
        write_parquet(table.take(list(range(0, table.num_rows, step))), target)


if __name__ == "__main__":
    main()
