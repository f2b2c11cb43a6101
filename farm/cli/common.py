"""What the commands share: the warehouse they read, and how they print."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

from farm.errors import UserError


def existing_folder(results: str) -> None:
    """Raise UserError unless `results` is a folder (a reader needs a warehouse)."""
    path = Path(results)
    if path.exists() and not path.is_dir():
        raise UserError(f"--results {results} is a file, not a warehouse folder: pass --results DIR")
    if not path.is_dir():
        raise UserError(f"no warehouse at {results}/: run `farm sweep configs/resnet.toml` first, "
                        "or pass --results DIR")


def require_sweep(results: str, sweep: str) -> None:
    """Raise UserError naming the sweeps there unless `sweep` is one of them."""
    from farm.warehouse import WarehouseReader

    existing_folder(results)
    sweeps = WarehouseReader(results).sweeps()
    if sweep not in sweeps:
        known = ", ".join(sweeps) or "none yet"
        raise UserError(f"no sweep {sweep!r} in {results}/; sweeps: {known}")


def console():
    """stdout; wide when it is a file or a pipe, so tables are not folded at 80 columns."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=160)


def connect(results: str):
    """The warehouse (read only) and a DuckDB connection with its views (damaged files left out,
    with a warning)."""
    from farm.warehouse import WarehouseReader

    existing_folder(results)
    warehouse = WarehouseReader(results)
    return warehouse, warehouse.connect()


def print_rows(columns: list[str], rows: list[tuple[Any, ...]], fmt: str) -> None:
    """Print query rows as a table, CSV or JSON."""
    if fmt == "json":
        print(json.dumps([dict(zip(columns, r)) for r in rows], default=str, indent=1))
    elif fmt == "csv":
        import csv

        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)
        sys.stdout.write(buffer.getvalue())
    else:
        from farm.display import render_table

        console().print(render_table(columns, rows))
