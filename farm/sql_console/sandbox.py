"""The one gate every SQL a user writes goes through (the dashboard's console and `farm query`):
what a query may read, and what it may be (locks 1 and 2 of farm/sql_console/console.py's docstring).

`Sandbox` is an in-memory DuckDB whose views read the warehouse through pyarrow datasets, with
DuckDB's own file access off and its configuration locked; `check_statement` lets through one
query (SELECT, PIVOT with an IN list, a plain EXPLAIN) whose parse tree names only the
warehouse's tables, its CTEs and a few table functions. Errors are one line, with this machine's
paths replaced (`scrub`).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from farm.warehouse import SCHEMAS, TABLES, WarehouseReader

MEMORY_LIMIT = "2GB"
SPILL_LIMIT = "4GB"
THREADS = max(1, min(4, os.cpu_count() or 1))  # a shared dashboard: a console query takes a few cores

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
    """A statement the gate does not let through, or one that failed; the message is one line."""


def _table_sources(warehouse: WarehouseReader, table: str, ds) -> list:
    """pyarrow datasets of the files of `table` that count, as every other reader sees them:
    per-cell files, and compacted blocks less the cells whose own files supersede their rows
    (farm.warehouse compaction); a damaged file is left out (the pages list it). Files an older
    farm wrote lack newer columns (read as nulls) or have older types (cast)."""
    loose, parts, superseded = warehouse.readable_sources(table)
    schema = SCHEMAS[table]
    sources = [ds.dataset([str(p) for p in loose], schema=schema, format="parquet")] if loose else []
    if parts:
        compacted = ds.dataset([str(p) for p in parts], schema=schema, format="parquet")
        if superseded:
            compacted = compacted.filter(~ds.field("cell_id").isin(sorted(superseded)))
        sources.append(compacted)
    return sources or [schema.empty_table()]


class Sandbox:
    """An in-memory DuckDB whose views read the warehouse through pyarrow; DuckDB itself can open
    no file outside its private spill folder (a fresh temporary folder, or `temp_dir`, an empty
    one made for it). `close` removes that folder."""

    def __init__(self, root: str | Path, memory_limit: str = MEMORY_LIMIT, spill_limit: str = SPILL_LIMIT,
                 threads: int = THREADS, temp_dir: str | Path | None = None) -> None:
        import duckdb
        import pyarrow.dataset as ds

        self.root = Path(root).resolve()
        self.memory_limit, self.spill_limit = memory_limit, spill_limit
        self.temp_dir = Path(temp_dir or tempfile.mkdtemp(prefix="farm-sql-")).resolve()
        self.con = None
        self._root_given = root
        if self.temp_dir.is_relative_to(self.root):
            self.close()
            raise QueryRefused(f"the temporary folder {self.temp_dir.parent} is inside the warehouse: "
                               "set TMPDIR to a folder outside it")
        try:
            self.con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                                          "autoload_known_extensions": False,
                                                          "threads": threads})  # not one per core first
            warehouse = WarehouseReader(self.root)
            for table in TABLES:
                first, *more = (self.con.from_arrow(source) for source in _table_sources(warehouse, table, ds))
                view = functools.reduce(lambda a, b: a.union(b), more, first)  # UNION ALL
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
        return scrub(text, self._root_given, self.temp_dir)


def scrub(text: str, root: str | Path, temp_dir: str | Path) -> str:
    """`text` with the warehouse's paths (as given and resolved) as `<results>` and the spill
    folder's as `<temp>`."""
    paths = {(str(Path(temp_dir).resolve()), "<temp>"), (str(temp_dir), "<temp>"),
             (str(Path(root).resolve()), "<results>"), (str(Path(root).absolute()), "<results>")}
    for path, placeholder in sorted(paths, key=lambda p: -len(p[0])):  # one path may contain another
        text = text.replace(path, placeholder)
    return text


def sandboxed_connection(root: str | Path, **limits) -> Sandbox:
    """A read-only DuckDB over the warehouse's tables (see `Sandbox`); close it when done."""
    return Sandbox(root, **limits)


def check_statement(sql: str) -> str:
    """The statement to run for `sql`: one query reading only what the gate allows; raises
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
        raise QueryRefused(f"{kind.name} statements are not allowed: queries over the warehouse are read-only "
                           "(SELECT, PIVOT and EXPLAIN only)")
    _check_tree(sql)
    return sql


def _one_statement(sql: str):
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryRefused(one_line(exc)) from None
    if not statements:
        raise QueryRefused("no statement: write a query, e.g. SELECT * FROM cells LIMIT 10")
    if len(statements) > 1:
        raise QueryRefused(f"{len(statements)} statements: one query at a time")
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
        raise QueryRefused(f"{hidden[0]}() is not available here (it keeps the machine's settings, "
                           "files and logs out of reach): query the warehouse's tables")
    shown = sorted(names["show"] - SHOW_LISTS - set(TABLES))
    if shown:
        raise QueryRefused(f"SHOW {shown[0]} is not available here (it shows a setting): "
                           "use SHOW TABLES or DESCRIBE <table>")
    shadowing = sorted(names["cte"] & catalog_views)
    if shadowing:
        raise QueryRefused(f"a CTE named {shadowing[0]} is not allowed (DuckDB has a catalog view of that name): "
                           "rename it")
    unknown = sorted(names["table"] - set(TABLES) - names["cte"])
    if unknown:
        raise QueryRefused(f"no table {unknown[0]} here: the warehouse's tables are {', '.join(TABLES)}")


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


def one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def lock(con, root: str | Path, temp_dir: str | Path) -> None:
    """Lock 1 for a connection whose views read the warehouse's files through DuckDB (`farm query`):
    DuckDB may open files under `root` (to read them; writing there is the statement check's to
    refuse) and its spill folder `temp_dir`, nothing else, and no query can change that."""
    from farm.warehouse.parquet import duckdb_glob_escape

    # the views name the warehouse's files by its absolute path (a link not followed) and as globs,
    # a `[` in the path escaped as `[[]`: every form
    places = {os.path.abspath(root), str(Path(root).resolve())}
    folders = sorted({form + os.sep for place in places for form in (place, duckdb_glob_escape(place))})
    folders.append(str(Path(temp_dir).resolve()) + os.sep)
    for setting, value in (("python_enable_replacements", False), ("temp_directory", str(temp_dir)),
                           ("allowed_directories", folders), ("enable_external_access", False),
                           ("lock_configuration", True)):
        con.execute(f"SET {setting} = ?", [value])
