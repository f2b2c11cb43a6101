"""`farm compact [SWEEP]`: merge per-cell files into a few large Parquet files per table."""

from __future__ import annotations

import argparse

from farm.cli.common import AddCommand, existing_folder, require_sweep


def add(add: AddCommand) -> None:
    """The `compact` subparser (`add` gives it --results)."""
    p = add("compact", "Merge sweeps' per-cell files into a few large Parquet files per table (docs/warehouse.md: "
                       "Compaction), so that queries, the dashboard and resume read a few files instead of one a "
                       "cell per table. A sweep does it itself as it ends once it has 1,000 cells in per-cell files.")
    p.add_argument("sweep", nargs="?", default=None, help="the sweep to compact (default: every sweep)")


def run(args: argparse.Namespace) -> int:
    from farm.warehouse import Warehouse

    if args.sweep is not None:
        require_sweep(args.results, args.sweep)
    existing_folder(args.results)
    warehouse = Warehouse(args.results)
    with warehouse.writer_lock():  # one writer at a time: exits 2 while a sweep or ingest writes
        for sweep in [args.sweep] if args.sweep is not None else warehouse.sweeps():
            done = warehouse.compact(sweep)
            for path, problem, moved_to in done.moved:
                print(f"moved damaged file {path} to {moved_to.parent}/ ({problem}): its cells are measured again")
            warehouse.consolidate(sweep)
            print(f"{sweep}: " + (f"{done.cells} cell(s) compacted" + (f", {done.rewritten} compacted cell(s) "
                                                                         "rewritten" if done.rewritten else "")
                                  + f", {done.files_removed} file(s) removed" if done.cells else "nothing to compact")
                  + f"; {done.blocks} compacted block(s)")
    return 0
