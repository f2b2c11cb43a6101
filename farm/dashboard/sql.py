"""The dashboard's SQL console: DuckDB over the warehouse, unable to write to it by construction.

Three locks, each enough for what it guards:

1. DuckDB opens no warehouse file. Each table is a pyarrow dataset over the table's Parquet
   files, registered in an in-memory DuckDB: pyarrow reads the files (a dataset scan cannot
   write) and DuckDB's own file access is off with no allowed directory or file, the
   configuration locked. DuckDB can write one place only, the spill folder it insists on
   allowing: a fresh temporary folder outside the warehouse, capped by
   `max_temp_directory_size`, removed when the connection closes. External access is turned
   off after connecting: off at connect, DuckDB 2.0 allows writing `:memory:` files in the
   working directory. Not chosen: `allowed_paths` naming each Parquet file (DuckDB lets a
   `COPY ... (USE_TMP_FILE false)` overwrite an allowed file), and copying the tables into
   memory (4 to 11 s before every query at 1,000 cells, against 0.1 s to set up the datasets;
   whole queries are 2 to 3 times faster than through DuckDB's reader: docs/dashboard.md). The
   cost: a query cannot name a file (`read_parquet('<results>/...')`); the tables are the way in.
2. Only a query, as DuckDB's parser sees it: one statement, a SELECT (with `FROM`-first,
   DESCRIBE, SUMMARIZE, SHOW TABLES, PIVOT with an `IN` list, UNPIVOT), or EXPLAIN of one,
   which the console runs as a plain EXPLAIN it builds itself (EXPLAIN ANALYZE would run its
   statement). The parse tree (`json_serialize_sql`) may name the warehouse's tables, its own
   CTEs and a few table functions, and no function that shows settings (they hold the spill
   folder's path) or writes a log.
3. Limits: rows and bytes returned (fetching stops at either), time (the query is
   interrupted), DuckDB's memory, spill space and threads. DuckDB computes a block of 2,048
   rows before the byte limit sees it, outside its memory limit: very wide rows still cost
   2,048 of them at once (1 MB rows: about 2.6 GB for a few seconds).

Errors are one line, with the warehouse's and the spill folder's paths replaced by `<results>`
and `<temp>`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd

from farm.warehouse import SCHEMAS, TABLES, Warehouse

DEFAULT_ROW_LIMIT = 10_000
DEFAULT_BYTE_LIMIT = 50 * 2**20  # Arrow bytes, as DuckDB hands them over; the browser gets about as much
DEFAULT_TIME_LIMIT_S = 30.0  # a GROUP BY over 1,000,000 layer rows in 10,000 files takes ~8 s on 2 cores
MEMORY_LIMIT = "2GB"
SPILL_LIMIT = "4GB"
THREADS = max(1, min(4, os.cpu_count() or 1))  # a shared dashboard: a console query takes a few cores
BATCH_ROWS = 1024  # rows per Arrow batch fetched: the byte limit is checked this often

# Table functions a query may call; every other one (duckdb_settings(), glob(), query(),
# enable_logging(), ...) shows the server's configuration, runs SQL from a string, or writes.
# The file readers stay so that a path reads as DuckDB's own refusal (lock 1).
TABLE_FUNCTIONS = frozenset({
    "range", "generate_series", "unnest", "repeat", "repeat_row", "json_each", "json_tree",
    "read_text", "read_blob", "read_csv", "read_csv_auto", "read_json", "read_json_auto", "read_ndjson",
    "read_ndjson_auto", "read_parquet", "parquet_scan"})
HIDDEN_FUNCTIONS = frozenset({"current_setting", "write_log", "sleep_ms"})  # settings; a log; a stall
SHOW_LISTS = frozenset({'"tables"', "__show_tables_expanded"})  # SHOW TABLES, SHOW ALL TABLES


class QueryRefused(Exception):
    """A statement the console does not run, or one that failed; the message is one line."""


@dataclasses.dataclass
class QueryResult:
    frame: pd.DataFrame
    truncated: bool  # cut at the row or the byte limit: only the first rows are in `frame`
    seconds: float
    byte_limited: bool = False  # the cut was the byte limit


class Sandbox:
    """An in-memory DuckDB whose views read the warehouse through pyarrow; DuckDB itself can open
    no file outside its private spill folder. `close` removes that folder."""

    def __init__(self, root: str | Path, memory_limit: str = MEMORY_LIMIT, spill_limit: str = SPILL_LIMIT,
                 threads: int = THREADS) -> None:
        import duckdb
        import pyarrow.dataset as ds

        self.root = Path(root).resolve()
        self.memory_limit, self.spill_limit = memory_limit, spill_limit
        self.temp_dir = Path(tempfile.mkdtemp(prefix="farm-sql-")).resolve()
        self.con = None
        self._paths = sorted({(str(self.temp_dir), "<temp>"), (str(self.root), "<results>"),
                              (str(Path(root).absolute()), "<results>")}, key=lambda p: -len(p[0]))
        if self.temp_dir.is_relative_to(self.root):
            self.close()
            raise QueryRefused(f"the temporary folder {self.temp_dir.parent} is inside the warehouse: "
                               "set TMPDIR to a folder outside it")
        try:
            self.con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                                          "autoload_known_extensions": False})
            warehouse = Warehouse(self.root)
            for table in TABLES:
                files = [str(p) for glob in warehouse.table_globs(table)
                         for p in sorted(Path(glob).parent.glob("*.parquet")) if not p.name.startswith(".")]
                # Files an older farm wrote lack newer columns (read as nulls) or have older types (cast).
                source = ds.dataset(files, schema=SCHEMAS[table], format="parquet") if files \
                    else SCHEMAS[table].empty_table()
                view = self.con.from_arrow(source)
                if table == "devices":  # one file per sweep that used the device
                    view = view.query("_files", "SELECT DISTINCT ON (device_id) * FROM _files")
                view.create_view(table)
            spill = str(self.temp_dir)
            for setting, value in (("enable_progress_bar", False), ("python_enable_replacements", False),
                                   ("threads", threads), ("memory_limit", memory_limit),
                                   ("temp_directory", spill), ("max_temp_directory_size", spill_limit),
                                   # no setting names a folder outside the spill folder
                                   ("secret_directory", f"{spill}/secrets"),
                                   ("extension_directory", f"{spill}/extensions"),
                                   ("enable_external_access", False), ("lock_configuration", True)):
                self.con.execute(f"SET {setting} = ?", [value])
        except BaseException:
            self.close()
            raise

    def execute(self, sql: str, parameters=None):
        return self.con.execute(sql, parameters)

    def sql(self, sql: str):
        return self.con.sql(sql)

    def interrupt(self) -> None:
        self.con.interrupt()

    def close(self) -> None:
        try:
            if self.con is not None:
                self.con.close()
        finally:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def scrub(self, text: str) -> str:
        """`text` without this machine's paths of the warehouse and the spill folder."""
        for path, placeholder in self._paths:  # longest first: one path may contain another
            text = text.replace(path, placeholder)
        return text


def sandboxed_connection(root: str | Path, **limits) -> Sandbox:
    """A read-only DuckDB over the warehouse's tables (see `Sandbox`); close it when done."""
    return Sandbox(root, **limits)


def check_statement(sql: str) -> str:
    """The statement to run for `sql`: one query reading only what the console allows; raises
    QueryRefused otherwise. EXPLAIN comes back rebuilt as a plain EXPLAIN of the checked query."""
    import duckdb

    kind = _one_statement(sql).type
    if kind == duckdb.StatementType.EXPLAIN:
        inner = _after_first_token(sql)
        try:
            plain = _first_word(sql) == "explain" and _one_statement(inner).type == duckdb.StatementType.SELECT
        except QueryRefused:
            plain = False
        if not plain:
            raise QueryRefused("EXPLAIN ANALYZE and EXPLAIN options are not allowed (they run the statement or "
                               "are not a query): write EXPLAIN SELECT ...")
        _check_tree(inner)
        return f"EXPLAIN {inner}"
    if kind == duckdb.StatementType.MULTI and _first_word(sql) in ("pivot", "unpivot"):
        raise QueryRefused("a PIVOT without an IN list is not allowed (DuckDB creates a type for it first): "
                           "name the values, e.g. PIVOT cells ON precision IN ('fp16', 'fp32') "
                           "USING count(*) GROUP BY model")
    if kind != duckdb.StatementType.SELECT:
        raise QueryRefused(f"{kind.name} statements are not allowed: the console is read-only "
                           "(SELECT, PIVOT and EXPLAIN only)")
    _check_tree(sql)
    return sql


def run_query(root: str | Path, sql: str, row_limit: int = DEFAULT_ROW_LIMIT,
              time_limit_s: float = DEFAULT_TIME_LIMIT_S, byte_limit: int = DEFAULT_BYTE_LIMIT,
              **limits) -> QueryResult:
    """Run one read-only query over the warehouse; raises QueryRefused with a one-line reason.
    `limits`: Sandbox's memory_limit, spill_limit and threads."""
    import duckdb
    import pyarrow as pa

    statement = check_statement(sql)
    started = time.perf_counter()
    sandbox = Sandbox(root, **limits)
    timer = threading.Timer(time_limit_s, sandbox.interrupt)
    timer.start()
    try:
        reader = sandbox.sql(statement).to_arrow_reader(BATCH_ROWS)
        batches, rows, size, cut = [], 0, 0, ""
        for batch in reader:
            if rows + batch.num_rows > row_limit:
                batch, cut = batch.slice(0, row_limit - rows), "rows"
            if size + batch.nbytes > byte_limit:
                batch, cut = _fit(batch, byte_limit - size), "bytes"
            batches.append(batch)
            rows, size = rows + batch.num_rows, size + batch.nbytes
            if cut:
                break
        table = pa.Table.from_batches(batches, schema=reader.schema)
    except duckdb.InterruptException:
        raise QueryRefused(f"stopped after the time limit of {time_limit_s:g} s: narrow the query "
                           "(a WHERE on sweep_id or cell_id, or a LIMIT)") from None
    except duckdb.OutOfMemoryException:
        raise QueryRefused(f"the query needs more than the console's {sandbox.memory_limit} of memory and "
                           f"{sandbox.spill_limit} of spill space: narrow it (a WHERE, fewer columns, "
                           "a LIMIT)") from None
    except (duckdb.Error, pa.ArrowException, OSError) as exc:
        raise QueryRefused(sandbox.scrub(_one_line(exc))) from None
    finally:
        timer.cancel()
        sandbox.close()
    return QueryResult(_frame(table), bool(cut), time.perf_counter() - started, byte_limited=cut == "bytes")


def _one_statement(sql: str):
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryRefused(_one_line(exc)) from None
    if not statements:
        raise QueryRefused("no statement: write a query, e.g. SELECT * FROM cells LIMIT 10")
    if len(statements) > 1:
        raise QueryRefused(f"{len(statements)} statements: the console runs one query at a time")
    return statements[0]


def _tokens(sql: str) -> list[tuple[int, int]]:
    """(start, end) byte offsets of `sql`'s tokens, comments left out."""
    import duckdb

    raw = sql.encode()
    found = duckdb.tokenize(sql)
    spans = [(start, found[i + 1][0] if i + 1 < len(found) else len(raw), kind)
             for i, (start, kind) in enumerate(found)]
    return [(start, end) for start, end, kind in spans if kind != duckdb.token_type.comment]


def _first_word(sql: str) -> str:
    tokens = _tokens(sql)
    return sql.encode()[tokens[0][0]:tokens[0][1]].decode().strip().lower() if tokens else ""


def _after_first_token(sql: str) -> str:
    """`sql` from its second token on (what follows EXPLAIN)."""
    tokens = _tokens(sql)
    return sql.encode()[tokens[1][0]:].decode() if len(tokens) > 1 else ""


def _check_tree(sql: str) -> None:
    """Refuse a query whose parse tree names anything but the warehouse's tables, its own CTEs and
    the allowed table functions, or a hidden function."""
    import duckdb

    parser = duckdb.connect(":memory:")  # parses only; a connection of its own, as threads share nothing
    try:
        tree = json.loads(parser.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0])
    finally:
        parser.close()
    if tree.get("error"):
        raise QueryRefused(f"{tree.get('error_type', 'parser')}: {tree.get('error_message', '')}".splitlines()[0])
    names: dict[str, set[str]] = {"function": set(), "table_function": set(), "table": set(), "show": set(),
                                  "cte": set()}
    _collect(tree, names)
    refused_functions, catalog_views = _catalog()
    hidden = sorted(names["function"] & refused_functions | names["table_function"] - TABLE_FUNCTIONS)
    if hidden:
        raise QueryRefused(f"{hidden[0]}() is not available in the console (it keeps the server's settings, "
                           "files and logs out of reach): query the warehouse's tables")
    shown = sorted(names["show"] - SHOW_LISTS - set(TABLES))
    if shown:
        raise QueryRefused(f"SHOW {shown[0]} is not available in the console (it shows a setting): "
                           "use SHOW TABLES or DESCRIBE <table>")
    shadowing = sorted(names["cte"] & catalog_views)
    if shadowing:
        raise QueryRefused(f"a CTE named {shadowing[0]} is not allowed (DuckDB has a catalog view of that name): "
                           "rename it")
    unknown = sorted(names["table"] - set(TABLES) - names["cte"])
    if unknown:
        raise QueryRefused(f"no table {unknown[0]} in the console: its tables are {', '.join(TABLES)}")


@functools.cache
def _catalog() -> tuple[frozenset[str], frozenset[str]]:
    """(functions refused, DuckDB's catalog views). Refused: HIDDEN_FUNCTIONS and DuckDB's macros
    built on one or on a table function not allowed (pg_get_viewdef() reads duckdb_views()), as a
    macro's body is not in the parse tree. The views (pg_settings, ...) may not be shadowed by a
    CTE, which would let the view's name through the table check outside the CTE's scope."""
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        functions = con.execute("SELECT DISTINCT lower(function_name), function_type, lower(macro_definition) "
                                "FROM duckdb_functions()").fetchall()
        views = frozenset(v for (v,) in con.execute("SELECT DISTINCT lower(view_name) FROM duckdb_views() "
                                                     "WHERE internal").fetchall())
    finally:
        con.close()
    tables = {name for name, kind, _ in functions if kind in ("table", "table_macro") and name not in TABLE_FUNCTIONS}
    macros = {name: body for name, kind, body in functions if kind == "macro" and body}
    hidden = set(HIDDEN_FUNCTIONS)
    while True:  # a macro may call a macro that calls a hidden function
        calls = re.compile(r"\b(" + "|".join(re.escape(n) for n in sorted(hidden | tables)) + r")\s*\(")
        more = {name for name, body in macros.items() if name not in hidden and calls.search(body)}
        if not more:
            return frozenset(hidden), views
        hidden |= more


def _collect(node, names: dict[str, set[str]]) -> None:
    if isinstance(node, list):
        for item in node:
            _collect(item, names)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if "function_name" in node:
        names["function"].add(node["function_name"].lower())
    if kind == "TABLE_FUNCTION":
        names["table_function"].add(str((node.get("function") or {}).get("function_name", "")).lower())
    elif kind == "BASE_TABLE":
        qualified = node.get("catalog_name") not in ("", "memory") or node.get("schema_name") not in ("", "main")
        table = node.get("table_name", "").lower()
        names["table"].add(f"{node.get('schema_name')}.{table}" if qualified else table)
    elif kind == "SHOW_REF" and not node.get("query"):
        names["show"].add(node.get("table_name", "").lower())
    for entry in (node.get("cte_map") or {}).get("map", []):
        names["cte"].add(str(entry.get("key", "")).lower())
    for value in node.values():
        _collect(value, names)


def _fit(batch, room: int):
    """The longest head of `batch` within `room` bytes."""
    low, high = 0, batch.num_rows
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if batch.slice(0, middle).nbytes <= room else (low, middle - 1)
    return batch.slice(0, low)


def _frame(table) -> pd.DataFrame:
    import pyarrow as pa

    table = table.rename_columns(_unique(table.column_names))
    try:
        return table.to_pandas()
    except pa.ArrowNotImplementedError:  # a type pandas has no column for (a UNION): Python objects there
        columns = {}
        for name, column in zip(table.column_names, table.columns):
            try:
                columns[name] = column.to_pandas()
            except pa.ArrowNotImplementedError:
                columns[name] = pd.Series(column.to_pylist(), dtype=object)
        return pd.DataFrame(columns)


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
