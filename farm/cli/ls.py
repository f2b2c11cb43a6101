"""`farm ls`: the warehouse's sweeps with their cell counts."""

from __future__ import annotations

import argparse
import sys

from farm.cli.common import AddCommand, connect, print_rows
from farm.queries import STATUS_COUNTS, sweeps_with_counts


def add(add: AddCommand) -> None:
    """The `ls` subparser (`add` gives it --results)."""
    add("ls", "List the sweeps in the warehouse with their cell counts.")


def run(args: argparse.Namespace) -> int:
    warehouse, con = connect(args.results)
    columns, data = warehouse.fetch(con, sweeps_with_counts(
        f"{STATUS_COUNTS}, any_value(r.runs) AS runs, strftime(any_value(r.last_run), '%Y-%m-%d %H:%M UTC') AS last_run"))
    if not data:
        print(f"no sweeps in {args.results}/ yet: run `farm sweep configs/resnet.toml`", file=sys.stderr)
        return 0
    print_rows(columns, data, "table")
    return 0
