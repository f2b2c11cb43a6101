"""`farm check [--fix]`: every file of the warehouse checked; with --fix, resolved."""

from __future__ import annotations

import argparse

from farm.cli.common import AddCommand, existing_folder
from farm.errors import UserError


def add(add: AddCommand) -> None:
    """The `check` subparser (`add` gives it --results)."""
    p = add("check", "Check every file of the warehouse: list damaged files (not whole Parquet, or not their "
                     "table's schema), orphaned files (a cell's file without its cells file, files of no table) "
                     "and temporary files interrupted runs left. Exit 1 if it found any, 0 if clean.")
    p.add_argument("--fix", action="store_true",
                   help="also resolve them (waits for no one: exits 2 while a sweep or ingest writes the warehouse): "
                        "move damaged files and files of no table to <sweep>/.damaged/ (a damaged cell file takes "
                        "its cells file along, so the next `farm sweep` measures the cell again), remove orphaned "
                        "cell files and temporary files, and bring the dashboard's consolidated copy up to date")


def run(args: argparse.Namespace) -> int:
    from farm.warehouse import Warehouse, describe_holder
    from farm.warehouse.check import NOT_RESOLVED

    existing_folder(args.results)
    warehouse = Warehouse(args.results)
    problem = warehouse.not_a_warehouse()  # --fix would move its files: refused, nothing touched
    if problem:
        raise UserError(f"{problem}; farm check looks only at farm warehouses: pass --results DIR of one")
    if args.fix:
        with warehouse.writer_lock():
            inspection = warehouse.inspect()
            done = warehouse.fix(inspection.findings)
            for sweep in warehouse.sweeps():
                warehouse.consolidate(sweep)
        lines = [f"{f.kind:8} {f.path}: {f.reason}; {action}" for f, action in done]
        unresolved = sum(action.startswith(NOT_RESOLVED) for _, action in done)
    else:
        inspection, unresolved = warehouse.inspect(), 0
        lines = [f"{f.kind:8} {f.path}: {f.reason}" for f in inspection.findings]
    for line in lines:
        print(line)
    counts = {kind: sum(f.kind == kind for f in inspection.findings)
              for kind in ("damaged", "orphan", "temp", "unmeasured")}
    found = ", ".join(f"{n} {name}" for name, n in
                      [("damaged", counts["damaged"]), ("orphaned", counts["orphan"]), ("temporary", counts["temp"]),
                       ("unmeasured", counts["unmeasured"])] if n)
    print(f"{inspection.files_checked} file(s) checked in {args.results}/: " + (found or "clean")
          + ("" if not found or args.fix else "; `farm check --fix` resolves them")
          + (f"; {unresolved} not resolved: the warehouse is not writable to this user" if unresolved else ""))
    if inspection.holder is not None:
        print(f"note: a writer holds the warehouse ({describe_holder(inspection.holder)}): "
              f"{inspection.in_progress} file(s) of its work in progress were not counted")
    if inspection.quarantined:
        print(f"note: {inspection.quarantined} file(s) moved aside earlier are in <sweep>/.damaged/ folders; "
              "delete them when you no longer need them")
    return 1 if inspection.findings else 0
