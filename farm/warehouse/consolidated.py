"""The consolidated copy of a warehouse's small tables, so that loading 10,000 cells is quick.

The warehouse keeps one file per cell (atomic writes, resume); reading 10,000 small files costs
about a millisecond each, so the writers (`farm sweep` and `farm ingest` as they finish, `farm
check --fix`) keep a consolidated copy per sweep and table under `<results>/.cache/dashboard/`,
with each row's source file, its mtime and size (`refresh_consolidated`). A load
(`load_sweep_table`) reads the copy, drops the rows of files that changed or disappeared, and
reads only new or changed files. Readers (the dashboard) never write the copy (nor anything else
in the warehouse), so what changed since the last writer refreshed it is read from the cell
files, in memory, at every load. The copy is a cache: without it a load reads every file.
Damaged cell files are skipped with a warning.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from farm.errors import first_line
from farm.files import write_atomic
from farm.warehouse.layout import PART
from farm.warehouse.parquet import duckdb_glob_escape, file_problem, parquet_files_named, sql_string
from farm.warehouse.schema import CACHE_DIR_NAME, SCHEMAS

if TYPE_CHECKING:
    from farm.warehouse.views import WarehouseViews

SMALL_TABLES = ("sweeps", "cells", "builds", "measurements", "accuracy", "devices")  # one row per cell or fewer


def create_table(con, table: str, name: str) -> None:
    """An empty DuckDB table `name` with the current schema of warehouse table `table`."""
    con.register("_schema", SCHEMAS[table].empty_table())
    con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM _schema")
    con.unregister("_schema")


def cache_path(root: Path, sweep: str, table: str) -> Path:
    return root / CACHE_DIR_NAME / "dashboard" / sweep / f"{table}.parquet"


def load_sweep_table(con, warehouse: WarehouseViews, sweep: str, table: str, target: str, save: bool = False) -> int:
    """Insert the rows of `table` for `sweep` into the DuckDB table `target` (which has the current
    schema's columns); returns how many files had to be read. Damaged files are left out (a
    warning through `warehouse.skip`). `save` writes the consolidated copy: writers only, under
    the warehouse's writer lock."""
    import duckdb

    root = warehouse.root  # as the warehouse spells it: the paths it skips are spelled so too
    directory = root / sweep / table
    failures: dict[Path, int] = {}
    unnamed = 0
    while True:
        try:
            return _load(con, warehouse, root, sweep, table, target, save)
        except duckdb.Error as exc:
            con.execute("DROP TABLE IF EXISTS _rows")
            path = next((p for p in parquet_files_named(exc, root) if p.parent == directory), None)
            if path is None:  # a garbled footer DuckDB does not name: parse the footers
                if warehouse.skip_unreadable_footers(directory / name for name in sorted(_listing(directory))):
                    continue
                unnamed += 1  # or a running sweep replaced a file between listing and reading
                if unnamed == 3 or not isinstance(exc, duckdb.IOException):
                    raise
                continue
            failures[path] = failures.get(path, 0) + 1
            if path in warehouse.skipped:
                raise
            if path.exists() and failures[path] > 1:  # failed twice as it is: damaged inside
                warehouse.skip(path, first_line(exc))


def _listing(directory: Path) -> dict[str, tuple[int, int]]:
    try:
        entries = os.scandir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    stats = {}
    with entries:
        for entry in entries:
            if entry.name.endswith(".parquet") and not entry.name.startswith(".") and not PART.match(entry.name):
                try:
                    stats[entry.name] = entry.stat()
                except FileNotFoundError:
                    continue
    return {name: (st.st_mtime_ns, st.st_size) for name, st in stats.items()}


def _load(con, warehouse: WarehouseViews, root: Path, sweep: str, table: str, target: str, save: bool) -> int:
    directory = root / sweep / table
    files = _listing(directory)
    cached = cache_path(root, sweep, table)
    schema_columns = ", ".join(f'"{n}"' for n in SCHEMAS[table].names)
    con.execute(f"CREATE OR REPLACE TEMP TABLE _rows AS SELECT {schema_columns}, ''::VARCHAR AS _file, "
                f"0::BIGINT AS _mtime_ns, 0::BIGINT AS _size FROM {target} LIMIT 0")
    kept: set[str] = set()
    stale = not cached.is_file()
    if not stale:
        copy = f"read_parquet('{sql_string(duckdb_glob_escape(str(cached)))}')"
        try:
            known = con.execute(f"SELECT DISTINCT _file, _mtime_ns, _size FROM {copy}").fetchall()
            kept = {name for name, mtime, size in known if files.get(name) == (mtime, size)}
            stale = len(kept) != len(known)  # files changed or removed since the copy was made
            if kept:
                con.register("_kept", pa.table({"_file": sorted(kept)}))
                con.execute(f"INSERT INTO _rows BY NAME SELECT * FROM {copy} WHERE _file IN (SELECT _file FROM _kept)")
                con.unregister("_kept")
        except Exception:  # noqa: BLE001 - a damaged or foreign cache is only a cache: read everything
            kept, stale = set(), True
            con.execute("DELETE FROM _rows")
    fresh = []
    for name in sorted(set(files) - kept):  # damaged files are left out: a check of their ends
        path = directory / name
        problem = None if path in warehouse.skipped else file_problem(path)
        if problem:
            warehouse.skip(path, problem)
        if path not in warehouse.skipped:
            fresh.append(name)
    if fresh:
        paths = ", ".join(f"'{sql_string(duckdb_glob_escape(str(directory / name)))}'" for name in fresh)
        source = f"read_parquet([{paths}], union_by_name = true, filename = true)"
        # The schema's columns that the files have (an older farm's lack newer ones: those stay
        # null), chosen in the same query so the files' footers are read once.
        shared = "COLUMNS('^(" + "|".join(SCHEMAS[table].names) + ")$')"
        con.register("_stats", pa.table({"_file": fresh, "_mtime_ns": pa.array([files[n][0] for n in fresh], pa.int64()),
                                           "_size": pa.array([files[n][1] for n in fresh], pa.int64())}))
        try:
            con.execute(f"""INSERT INTO _rows BY NAME
                            SELECT {shared}, s._file, s._mtime_ns, s._size
                            FROM {source} f JOIN _stats s ON s._file = parse_filename(f.filename)""")
        finally:
            con.unregister("_stats")
    if save and (fresh or stale):
        _save(con, cached)
    con.execute(f"INSERT INTO {target} SELECT {schema_columns} FROM _rows")
    con.execute("DROP TABLE _rows")
    _load_compacted(con, warehouse, sweep, table, target)
    return len(fresh)


def _load_compacted(con, warehouse: WarehouseViews, sweep: str, table: str, target: str) -> None:
    """Insert the sweep's compacted rows of `table` (a few large files: read as they are, never
    copied), less those of cells that have files of their own (farm.warehouse.layout)."""
    found = warehouse.sources(sweep, table)
    parts = []
    for path in found.parts:
        problem = file_problem(path)
        if problem:
            warehouse.skip(path, problem)
        else:
            parts.append(path)
    import duckdb

    shared = "COLUMNS('^(" + "|".join(SCHEMAS[table].names) + ")$')"
    con.register("_superseded", pa.table({"cell_id": pa.array(sorted(found.superseded), pa.string())}))
    try:
        while parts:
            paths = ", ".join(f"'{sql_string(duckdb_glob_escape(str(p)))}'" for p in parts)
            try:  # one statement: a failure inserts nothing
                con.execute(f"""INSERT INTO {target} BY NAME SELECT {shared}
                                FROM read_parquet([{paths}], union_by_name = true)
                                WHERE cell_id NOT IN (SELECT cell_id FROM _superseded)""")
                return
            except duckdb.Error as exc:  # damaged inside: the file it names, or those whose footer fails
                named = [p for p in parquet_files_named(exc, warehouse.root) if p in parts]
                for path in named:
                    warehouse.skip(path, first_line(exc))
                if not named and not warehouse.skip_unreadable_footers(parts):
                    raise
                parts = [p for p in parts if p not in warehouse.skipped]
    finally:
        con.unregister("_superseded")


def _save(con, cached: Path) -> None:
    """Write the consolidated copy atomically; skipped where the warehouse is not writable."""
    try:
        write_atomic(cached, lambda tmp: con.execute(f"COPY _rows TO '{sql_string(str(tmp))}' (FORMAT parquet)"),
                     make_parents=True)
    except Exception:  # noqa: BLE001 - read-only folder, full disk: the dashboard works without it
        pass


def refresh_consolidated(warehouse: WarehouseViews, sweep: str) -> None:
    """Bring the consolidated copy of one sweep up to date: what `farm sweep` and `farm ingest` do
    when they finish, and `farm check --fix`, all holding the writer lock, so that the
    dashboard's first load of a large warehouse is quick too."""
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        for table in SMALL_TABLES:
            create_table(con, table, "_scratch")
            load_sweep_table(con, warehouse, sweep, table, "_scratch", save=True)
    except Exception:  # noqa: BLE001 - only a cache: the dashboard reads the cell files without it
        pass
    finally:
        con.close()
