"""The dashboard's SQL console: DuckDB over the warehouse, read-only.

Three locks, each enough for what it guards:
- DuckDB's own: external access off, with the warehouse's table folders as the only allowed
  directories, then the configuration locked (so no file elsewhere can be read or written, no
  extension loaded, no database attached, and the settings cannot be turned back);
- one statement at a time, and only a query (SELECT, or PIVOT, or EXPLAIN of one): COPY,
  EXPORT, CREATE, INSERT, SET and the rest are refused before they run, so even the warehouse's
  own folders cannot be written;
- a row limit (fetch stops there) and a time limit (the query is interrupted).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pandas as pd

from farm.warehouse import TABLES, Warehouse

DEFAULT_ROW_LIMIT = 10_000
DEFAULT_TIME_LIMIT_S = 30.0  # a GROUP BY over 1,000,000 layer rows in 10,000 files takes ~8 s on 2 cores
MEMORY_LIMIT = "2GB"


class QueryRefused(Exception):
    """A statement the console does not run, or one that failed; the message is one line."""


@dataclasses.dataclass
class QueryResult:
    frame: pd.DataFrame
    truncated: bool  # more rows than the limit; only the first `row_limit` are in `frame`
    seconds: float


def sandboxed_connection(root: str | Path):
    """An in-memory DuckDB with one view per warehouse table that can read those tables' files
    and nothing else."""
    import duckdb

    warehouse = Warehouse(Path(root).resolve())
    con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                             "autoload_known_extensions": False})
    con.execute("SET enable_progress_bar = false")
    warehouse.create_views(con)
    folders = sorted({str(Path(glob).parent) + "/" for table in TABLES for glob in warehouse.table_globs(table)})
    con.execute("SET allowed_directories = ?", [folders])
    con.execute("SET enable_external_access = false")
    con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
    con.execute("SET lock_configuration = true")
    return con


def check_statement(sql: str) -> None:
    """Refuse anything but one query."""
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryRefused(_one_line(exc)) from None
    if not statements:
        raise QueryRefused("no statement: write a query, e.g. SELECT * FROM cells LIMIT 10")
    if len(statements) > 1:
        raise QueryRefused(f"{len(statements)} statements: the console runs one query at a time")
    kind = statements[0].type
    allowed = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
    # PIVOT parses as MULTI (it declares an enum type, then selects): allowed when it is a PIVOT.
    is_pivot = kind == duckdb.StatementType.MULTI and sql.lstrip().lower().startswith(("pivot", "unpivot"))
    if kind not in allowed and not is_pivot:
        raise QueryRefused(f"{kind.name} statements are not allowed: the console is read-only "
                           "(SELECT, PIVOT and EXPLAIN only)")


def run_query(root: str | Path, sql: str, row_limit: int = DEFAULT_ROW_LIMIT,
              time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> QueryResult:
    """Run one read-only query over the warehouse; raises QueryRefused with a one-line reason."""
    import duckdb

    check_statement(sql)
    con = sandboxed_connection(root)
    timer = threading.Timer(time_limit_s, con.interrupt)
    started = time.perf_counter()
    timer.start()
    try:
        cursor = con.execute(sql)
        if cursor.description is None:
            return QueryResult(pd.DataFrame(), False, time.perf_counter() - started)
        columns = [d[0] for d in cursor.description]
        rows = cursor.fetchmany(row_limit + 1)
    except duckdb.InterruptException:
        raise QueryRefused(f"stopped after the time limit of {time_limit_s:g} s: narrow the query "
                           "(a WHERE on sweep_id or cell_id, or a LIMIT)") from None
    except duckdb.Error as exc:
        raise QueryRefused(_one_line(exc)) from None
    finally:
        timer.cancel()
        con.close()
    truncated = len(rows) > row_limit
    frame = pd.DataFrame.from_records(rows[:row_limit], columns=_unique(columns))
    return QueryResult(frame, truncated, time.perf_counter() - started)


def _unique(columns: list[str]) -> list[str]:
    """Column names made unique (SELECT a.x, b.x gives two 'x'), as a table display needs."""
    seen: dict[str, int] = {}
    out = []
    for name in columns:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return out


def _one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
