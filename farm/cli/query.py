"""`farm query SQL`: run SQL over the warehouse and print every digit of what it returns."""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable
from decimal import Decimal
from typing import Any, TypeVar

from farm.cli.common import PLAIN_TABLE_ROWS, AddCommand, connect, exact_text, print_exact_table, print_plain_table, print_rows
from farm.errors import UserError, first_line

T = TypeVar("T")


def add(add: AddCommand) -> None:
    """The `query` subparser (`add` gives it --results)."""
    p = add("query", "Run SQL over the warehouse (tables: sweeps, cells, builds, measurements, samples, "
                     "layers, accuracy, devices; columns in docs/warehouse.md).")
    p.add_argument("sql", help='e.g. "SELECT model, batch, throughput_qps FROM cells JOIN measurements USING (cell_id)"')
    p.add_argument("--format", choices=["table", "csv", "json", "markdown"], default="table", help="output format")


# Statements that only read (PIVOT is MULTI); any other (COPY ... TO, CREATE, EXPORT, ATTACH) may
# write files, the warehouse's among them, unlocked while a sweep writes it: refused
READING_STATEMENTS = {"SELECT", "EXPLAIN", "MULTI"}


def _interruptible(con, query: Callable[[], T]) -> T:
    """`query()` on a thread of its own, so that Ctrl-C (which Python delivers to this thread only
    between bytecodes, never inside DuckDB's execution) interrupts DuckDB and ends the command. It
    waits on an Event, not Thread.join: a join cut short by Ctrl-C leaves the thread marked ended
    (Python before 3.13), and the command would exit while DuckDB still ran (an abort)."""
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            outcome["value"] = query()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread as it is
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name="farm-query", daemon=True).start()
    try:
        while not done.wait(0.2):
            pass
    except KeyboardInterrupt:
        con.interrupt()
        done.wait(60)  # DuckDB stops within moments of the interrupt
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


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
    writes = sorted({s.type.name for s in statements if s.type.name not in READING_STATEMENTS})
    if writes:
        raise UserError(f"farm query only reads (SELECT, EXPLAIN, PIVOT), and this is {', '.join(writes)}, "
                        "which may write files, the warehouse's among them: to keep a result, "
                        "farm query ... --format csv > result.csv")
    try:
        columns, rows = _interruptible(con, lambda: warehouse.fetch(con, args.sql))
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
