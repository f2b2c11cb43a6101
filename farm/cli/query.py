"""`farm query SQL`: run SQL over the warehouse and print every digit of what it returns."""

from __future__ import annotations

import argparse
from decimal import Decimal

from farm.cli.common import PLAIN_TABLE_ROWS, AddCommand, connect, exact_text, print_exact_table, print_plain_table, print_rows
from farm.errors import UserError, first_line


def add(add: AddCommand) -> None:
    """The `query` subparser (`add` gives it --results)."""
    p = add("query", "Run SQL over the warehouse (tables: sweeps, cells, builds, measurements, samples, "
                     "layers, accuracy, devices; columns in docs/warehouse.md).")
    p.add_argument("sql", help='e.g. "SELECT model, batch, throughput_qps FROM cells JOIN measurements USING (cell_id)"')
    p.add_argument("--format", choices=["table", "csv", "json", "markdown"], default="table", help="output format")


def run(args: argparse.Namespace) -> int:
    import duckdb

    try:
        statements = duckdb.extract_statements(args.sql)
    except duckdb.Error as exc:
        raise UserError(f"query failed: {first_line(exc)}") from None
    if not statements:
        raise UserError('the query has no SQL statement (it is empty or only a comment): '
                        'e.g. farm query "SELECT * FROM cells LIMIT 10"')
    warehouse, con = connect(args.results)
    try:
        columns, rows = warehouse.fetch(con, args.sql)
    except duckdb.Error as exc:
        raise UserError(f"query failed: {first_line(exc)}") from None
    if columns is None:
        return 0
    if args.format == "table":  # what the SQL returns, every digit of it: round in the SQL to see fewer
        exact = [tuple(exact_text(v) for v in row) for row in rows]
        numeric = [any(isinstance(r[i], (int, float, Decimal)) and not isinstance(r[i], bool) for r in rows)
                   for i in range(len(columns))]
        if len(rows) > PLAIN_TABLE_ROWS:
            print_plain_table(columns, exact, numeric)
        else:
            print_exact_table(columns, exact, numeric)
        return 0
    print_rows(columns, rows, args.format)
    return 0
