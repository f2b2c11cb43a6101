"""What the commands share: the warehouse they read, and how they print."""

from __future__ import annotations

import argparse
import io
import itertools
import json
import math
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from farm.errors import UserError

AddCommand = Callable[[str, str], "argparse.ArgumentParser"]  # adds one command's parser (with --results)


def existing_folder(results: str) -> None:
    """Raise UserError unless `results` is a folder (a reader needs a warehouse)."""
    path = Path(results)
    if path.exists() and not path.is_dir():
        raise UserError(f"--results {results} is a file, not a warehouse folder: pass --results DIR")
    if not path.is_dir():
        raise UserError(f"no warehouse at {results}/: run `farm sweep configs/resnet.toml` first, "
                        "or pass --results DIR")
    from farm.warehouse.layout import WarehouseLayout
    from farm.warehouse.lock import WarehouseLocking

    foreign = WarehouseLocking(WarehouseLayout(path)).not_a_warehouse()  # as writers refuse it
    if foreign:  # not "0 rows": what was asked of it has no answer there
        raise UserError(f"{foreign}: pass --results DIR of a warehouse")


def require_sweep(results: str, sweep: str) -> None:
    """Raise UserError naming the sweeps there unless `sweep` is one of them."""
    from farm.warehouse import WarehouseReader

    existing_folder(results)
    sweeps = WarehouseReader(results).sweeps()
    if sweep not in sweeps:
        known = ", ".join(sweeps) or "none yet"
        raise UserError(f"no sweep {sweep!r} in {results}/; sweeps: {known}")


def console():
    """stdout; as wide as a file or pipe needs (its `COLUMNS` where set), so tables are not folded
    at 80 columns."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=_columns() or 1 << 16)


def table_width(out) -> int | None:
    """The width a table must fit on `out`: the terminal's, a file's or pipe's `COLUMNS`, or None
    (a file or pipe without it: no limit)."""
    return out.width if out.is_terminal else _columns()


def _columns() -> int | None:
    try:
        value = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return None
    return value if value > 0 else None


def connect(results: str):
    """The warehouse (read only) and a DuckDB connection with its views (damaged files left out,
    with a warning)."""
    from farm.warehouse import WarehouseReader

    existing_folder(results)
    warehouse = WarehouseReader(results)
    return warehouse, warehouse.connect()


def print_rows(columns: list[str], rows: list[tuple[Any, ...]], fmt: str) -> None:
    """Print query rows as a table, CSV, JSON or Markdown."""
    if fmt == "json":
        print(json.dumps([dict(zip(columns, r)) for r in rows], default=str, indent=1))
    elif fmt == "csv":
        import csv

        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[not_a_formula(v) for v in row] for row in rows])
        sys.stdout.write(buffer.getvalue())
    elif fmt == "markdown":
        sys.stdout.write(markdown_table(columns, rows))
    else:
        from rich.console import Console

        from farm.display import fmt, render_table

        table, out = render_table(columns, rows), console()
        width = table_width(out)
        if width is not None and Console(width=1 << 20).measure(table).maximum > width:
            # a table wider than the terminal would cut values (a sweep's name, a date): records instead
            print_records(columns, [tuple(fmt(v) for v in row) for row in rows], width)
        else:
            out.print(table)


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def not_a_formula(value: Any) -> Any:
    """A text that a spreadsheet would run as a formula (`=HYPERLINK(...)`, `+cmd|...`) opened from
    CSV, with a leading apostrophe, as spreadsheets themselves write it; numbers as they are."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        try:
            float(value)
            return value  # '-1.5': a number written as text
        except ValueError:
            return "'" + value
    return value


def markdown_table(columns: list[str], rows: list[tuple[Any, ...]]) -> str:
    """A GitHub-flavoured Markdown table; numbers right-aligned; values as text, never markup (a
    model named `![x](http://host/x.png)` is not an image to fetch), line breaks as spaces."""
    from farm.display import fmt
    from farm.text import markdown_text

    def cell(value: Any) -> str:
        return markdown_text(" ".join(fmt(value).split()))

    numeric = [any(isinstance(r[i], (int, float)) and not isinstance(r[i], bool) for r in rows)
               for i in range(len(columns))]
    lines = ["| " + " | ".join(cell(c) for c in columns) + " |",
             "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def exact_text(value: object) -> str:
    """A value as the query returned it: floats to the shortest text that reads back as the same
    number (0.1, 1234.56789, 1e-07), not rounded to 4 significant digits; the rest as `farm show`
    prints it (blank for NULL, yes/no)."""
    from farm.display import fmt, printable

    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    return printable(fmt(value))


def print_exact_table(columns: list[str], rows: list[tuple[str, ...]], numeric: list[bool]) -> None:
    from rich.table import Table

    table = Table(header_style="bold")
    for name, right in zip(columns, numeric):
        table.add_column(name, justify="right" if right else "left", overflow="fold")
    for row in rows:
        table.add_row(*row)
    console().print(table, highlight=False, markup=False)


def print_records(columns: list[str], rows: list[tuple[str, ...]], width: int) -> None:
    """Each row as a record, one `column  value` line per column (psql's expanded display): what a
    table of more columns than the terminal holds prints instead of a grid of broken values."""
    from farm.display import printable

    pad = max(len(name) for name in columns)
    for number, row in enumerate(rows, 1):
        print(f"-[ row {number} ]".ljust(min(width, pad + 20), "-"))
        for name, value in zip(columns, row):
            print(f"{printable(name).ljust(pad)}  {printable(value)}")
    if not rows:
        print(f"(no rows; columns: {', '.join(printable(c) for c in columns)})")


PLAIN_TABLE_ROWS = 500  # a larger `farm show` prints plain text: rich lays out 2,500 rows in about 40 s


def print_plain_table(columns: list[str], rows: list[tuple], numeric: list[bool] | None = None) -> None:
    """Rows as aligned plain text (numbers right-aligned), as quick for 25,000 rows as for 25.
    Values are formatted with farm.display.fmt (texts stay as they are); `numeric` says which
    columns to right-align where the rows are texts already."""
    from farm.display import fmt, printable

    text = [[printable(fmt(v)) for v in row] for row in rows]
    if numeric is None:
        numeric = [any(isinstance(r[i], (int, float)) and not isinstance(r[i], bool) for r in rows)
                   for i in range(len(columns))]
    write_plain_table(columns, [text], numeric)


def write_plain_table(columns: list[str], chunks: Iterable[list[list[str]]], numeric: list[bool]) -> None:
    """Rows already text, given in chunks, as aligned plain text (`numeric` columns right-aligned),
    each chunk written as it comes: the column widths are the first chunk's (a longer value later
    is written whole)."""
    chunks = iter(chunks)
    first = next(chunks, [])
    widths = [max([len(c)] + [len(r[i]) for r in first]) for i, c in enumerate(columns)]
    sys.stdout.write("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip() + "\n"
                     + "  ".join("-" * w for w in widths) + "\n")
    for rows in itertools.chain([first], chunks):
        sys.stdout.write("".join("  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in
                                           zip(r, widths, numeric)).rstrip() + "\n" for r in rows))

