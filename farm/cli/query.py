"""`farm query SQL`: run SQL over the warehouse and print every digit of what it returns."""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

from farm.cli.common import (
    PLAIN_TABLE_ROWS,
    AddCommand,
    connect,
    console,
    exact_text,
    markdown_table,
    not_a_formula,
    print_exact_table,
    print_records,
    table_width,
    write_plain_table,
)
from farm.errors import UserError, first_line

T = TypeVar("T")


def add(add: AddCommand) -> None:
    """The `query` subparser (`add` gives it --results)."""
    p = add("query", "Run SQL over the warehouse (tables: sweeps, cells, builds, measurements, samples, "
                     "layers, accuracy, serving, devices; columns in docs/warehouse.md).")
    p.add_argument("sql", help='e.g. "SELECT model, batch, throughput_qps FROM cells JOIN measurements USING (cell_id)"')
    p.add_argument("--format", choices=["table", "csv", "json", "markdown"], default="table", help="output format")


INTERRUPT_TRIES = 120  # a minute of interrupts, every half second, for a statement to stop


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
        # again and again: an interrupt that comes before DuckDB starts the statement (the thread
        # still preparing it) is forgotten when it starts; DuckDB stops within moments of one
        for _ in range(INTERRUPT_TRIES):
            con.interrupt()
            if done.wait(0.5):
                break
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def run(args: argparse.Namespace) -> int:
    import duckdb

    from farm.sql_console.sandbox import QueryRefused, check_statement, lock

    try:
        statements = duckdb.extract_statements(args.sql)
    except duckdb.Error as exc:
        raise UserError(f"query failed: {first_line(exc)}") from None
    if not statements:
        raise UserError('the query has no SQL statement (it is empty or only a comment): '
                        'e.g. farm query "SELECT * FROM cells LIMIT 10"')
    warehouse, con = connect(args.results)
    try:  # the gate the dashboard's console uses (farm.sql_console.sandbox): one read-only query
        sql = check_statement(args.sql)
    except QueryRefused as exc:
        hint = "; to keep a result: farm query ... --format csv > result.csv" if "not allowed" in str(exc) else ""
        raise UserError(f"farm query only reads the warehouse: {exc}{hint}") from None
    spill = Path(tempfile.mkdtemp(prefix="farm-query-"))
    try:
        lock(con, warehouse.root, spill)  # and DuckDB opens nothing outside the warehouse and its spill folder
        try:  # the first chunk is read on its own thread (Ctrl-C stops it); later ones are small
            columns, chunks = _interruptible(con, lambda: warehouse.stream(con, sql))
        except duckdb.Error as exc:
            raise UserError(f"query failed: {first_line(exc)}") from None
        if columns is None:
            return 0
        try:
            PRINTERS[args.format](columns, chunks)
        except duckdb.Error as exc:
            raise UserError(f"query failed after the rows printed above: {first_line(exc)}") from None
        return 0
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)


def _table(columns: list[str], chunks: Iterator[list[tuple]]) -> None:
    """What the SQL returns, every digit of it (round in the SQL to see fewer): a boxed table up to
    PLAIN_TABLE_ROWS rows, else plain aligned text printed as it is read, its column widths from
    the first chunk (a longer value later is printed whole)."""
    first = next(chunks, [])
    more = next(chunks, None)
    numeric = [any(isinstance(r[i], (int, float, Decimal)) and not isinstance(r[i], bool) for r in first)
               for i in range(len(columns))]
    if more is None and len(first) <= PLAIN_TABLE_ROWS:
        texts = [tuple(exact_text(v) for v in row) for row in first]
        width = table_width(console())
        if width is not None and _table_needs(columns, texts) > width:  # a grid would break its values
            print_records(columns, texts, width)
            return
        print_exact_table(columns, texts, numeric)
        return
    from farm.display import printable

    texts = ([[printable(exact_text(v)) for v in row] for row in rows]
             for rows in itertools.chain([first], [more] if more else [], chunks))
    write_plain_table(columns, texts, numeric)


def _table_needs(columns: list[str], rows: list[tuple[str, ...]]) -> int:
    """The width a boxed table of `rows` needs for no header word and no value to be broken."""
    widest = [max([len(word) for word in name.split()] or [0]) for name in columns]
    for row in rows:
        widest = [max(w, len(v)) for w, v in zip(widest, row)]
    return sum(widest) + 3 * len(columns) + 1


def _csv(columns: list[str], chunks: Iterator[list[tuple]]) -> None:
    import csv

    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(columns)
    for rows in chunks:
        writer.writerows([[not_a_formula(v) for v in row] for row in rows])


def _json(columns: list[str], chunks: Iterator[list[tuple]]) -> None:
    """A JSON list of objects, one per row, written as it is read."""
    sys.stdout.write("[")
    separator = "\n"
    for rows in chunks:
        for row in rows:
            text = json.dumps(dict(zip(columns, row)), default=str, indent=1)
            sys.stdout.write(separator + "\n".join(" " + line for line in text.splitlines()))
            separator = ",\n"
    sys.stdout.write("\n]\n" if separator != "\n" else "]\n")


def _markdown(columns: list[str], chunks: Iterator[list[tuple]]) -> None:
    """A Markdown table; its alignment from the first chunk's values."""
    first = next(chunks, [])
    sys.stdout.write(markdown_table(columns, first))
    for rows in chunks:
        sys.stdout.write(markdown_table(columns, rows).split("\n", 2)[2])


PRINTERS = {"table": _table, "csv": _csv, "json": _json, "markdown": _markdown}
