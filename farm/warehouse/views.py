"""Reading a warehouse: DuckDB views over its files, leaving damaged files out.

A damaged file costs only its cell: readers skip a file that is not whole Parquet with a one-line
warning naming it (DuckDB fails on it; only then are that table's files checked, by their first
and last bytes, ~15 µs a file). Views list one glob per sweep folder (the files by name in a
folder holding a damaged one), never the warehouse root.

A sweep compacted while a view over it is open (farm.warehouse.compact: blocks written, the manifest
committed, then the per-cell files removed) would leave that view reading the wrong files, since a
glob is expanded at each query: so the glob never matches compacted files (`[!p]*.parquet`; files
by name where a per-cell name starts with "p"), and `fetch` runs a query again on fresh views when
a sweep's manifest changed since its views were made.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from farm.errors import first_line
from farm.warehouse.layout import COMPACTED_TABLES, MANIFEST_NAME, WarehouseLayout
from farm.warehouse.parquet import duckdb_glob_escape, file_problem, files_gone, parquet_files_named, parquet_names, sql_string
from farm.warehouse.schema import SCHEMAS

if TYPE_CHECKING:
    import duckdb


# How often one query is run again on fresh views because sweeps were compacted while it ran
VIEW_REFRESHES = 3
STREAM_ROWS = 10_000  # rows a chunk of `stream` holds


class WarehouseViews:
    """DuckDB over the warehouse (a part of the warehouse handles: farm.warehouse.reader, store)."""

    def __init__(self, layout: WarehouseLayout) -> None:
        self.layout = layout

    def latest_plan(self, sweep: str) -> list[str] | None:
        """The cell ids the sweep's latest recorded run planned; None where no run recorded them
        (older warehouses, ingested sweeps). Unreadable `sweeps` files are skipped, with a warning."""
        latest: tuple | None = None
        for path in self.layout.table_files(sweep, "sweeps"):
            if path in self.layout.skipped:
                continue
            try:
                table = pq.read_table(path)
            except FileNotFoundError:
                continue
            except Exception as exc:  # noqa: BLE001 - any reason a file cannot be read makes it damaged
                self.layout.skip(path, f"unreadable: {first_line(exc)}")
                continue
            if "planned_cell_ids" not in table.column_names:
                continue
            for row in table.select(["started_at", "planned_cell_ids"]).to_pylist():
                if row["planned_cell_ids"] is not None and (latest is None or row["started_at"] > latest[0]):
                    latest = (row["started_at"], row["planned_cell_ids"])
        return None if latest is None else list(latest[1])

    def connect(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB with one view per table over the warehouse's readable Parquet files."""
        import duckdb

        con = duckdb.connect(":memory:")
        self.create_views(con)
        return con

    def table_globs(self, table: str) -> list[str]:
        """One glob per sweep that has files of `table`: views list them so that DuckDB never has
        to list the warehouse's root (the SQL console allows reading those folders only)."""
        return [str(folder / table / "*.parquet") for folder in self.layout.sweep_dirs()
                if parquet_names(folder / table)]

    def readable_sources(self, table: str) -> tuple[list[Path], list[Path], set[str]]:
        """Every sweep's per-cell files of `table` and its compacted files that count (damaged ones
        left out), and the cells whose compacted rows the per-cell files supersede: for readers
        that build their own view (the dashboard's SQL console)."""
        loose: list[Path] = []
        parts: list[Path] = []
        superseded: set[str] = set()
        for folder in self.layout.sweep_dirs():
            found = self.layout.sources(folder.name, table)
            loose += [p for p in found.loose if file_problem(p) is None]
            parts += [p for p in found.parts if file_problem(p) is None]
            superseded |= found.superseded
        return loose, parts, superseded

    def create_views(self, con: duckdb.DuckDBPyConnection) -> None:
        """Create (or replace) one view per table in `con`; an empty typed view where the table
        has no file. Damaged files are left out, each with a one-line warning."""
        stamp = self.manifests_stamp()  # before the listing: a compaction after it is seen by `fetch`
        for table in SCHEMAS:
            self._create_view(con, table)
        if not hasattr(self, "_view_stamps"):
            self._view_stamps = weakref.WeakKeyDictionary()
        self._view_stamps[con] = stamp

    def manifests_stamp(self) -> tuple:
        """Every sweep's compaction manifest as (sweep, inode, mtime, size), None where it has none:
        what changes when a sweep is compacted (the manifest is replaced whole)."""
        found = []
        for folder in self.layout.sweep_dirs():
            try:
                st = os.stat(folder / MANIFEST_NAME)
                found.append((folder.name, st.st_ino, st.st_mtime_ns, st.st_size))
            except OSError:
                found.append((folder.name, None))
        return tuple(found)

    def _views_stale(self, con: duckdb.DuckDBPyConnection) -> bool:
        """Whether a sweep was compacted since `con`'s views were made (False for a connection whose
        views this warehouse did not make)."""
        stamps = getattr(self, "_view_stamps", None)
        made = stamps.get(con) if stamps is not None else None
        return made is not None and self.manifests_stamp() != made

    def _refresh_stale_views(self, con: duckdb.DuckDBPyConnection) -> bool:
        """Make `con`'s views again if a sweep was compacted since they were made; whether it did."""
        if not self._views_stale(con):
            return False
        self.create_views(con)
        return True

    def fetch(self, con: duckdb.DuckDBPyConnection, sql: str,
              params: Any = None) -> tuple[list[str] | None, list[tuple[Any, ...]]]:
        """Run `sql` on a connection with this warehouse's views: (column names, rows), or (None, [])
        for a statement without a result. A file that turns out unreadable only now (its ends are
        whole, its insides are not) is left out with a warning and the query run again; so is a
        query that read while a sweep was compacted (on fresh views, at most three times)."""
        columns, rows, _ = self._run(con, sql, params, lambda cursor: cursor.fetchall())
        return columns, rows

    def stream(self, con: duckdb.DuckDBPyConnection, sql: str, params: Any = None,
               size: int = STREAM_ROWS) -> tuple[list[str] | None, Iterator[list[tuple[Any, ...]]]]:
        """`fetch` a chunk at a time: (column names, an iterator of lists of at most `size` rows), so
        that ten million rows never sit in memory at once. The first chunk is read as `fetch` reads
        (retried over a damaged file or a compaction); a file found unreadable after it is an error."""
        columns, first, cursor = self._run(con, sql, params, lambda c: c.fetchmany(size))

        def chunks() -> Iterator[list[tuple[Any, ...]]]:
            rows = first
            while rows:
                yield rows
                rows = cursor.fetchmany(size)

        return columns, chunks()

    def _run(self, con: duckdb.DuckDBPyConnection, sql: str, params: Any,
             read: Callable[[Any], list[tuple[Any, ...]]]) -> tuple[list[str] | None, list[tuple[Any, ...]], Any]:
        import duckdb

        seen = set()
        refreshed = 0
        while True:
            try:
                cursor = con.execute(sql, params)
                found = (None, [], cursor) if cursor.description is None else (
                    [d[0] for d in cursor.description], read(cursor), cursor)
            except duckdb.Error as exc:
                if refreshed < VIEW_REFRESHES and self._refresh_stale_views(con):  # files moved: read again
                    refreshed += 1
                    continue
                if str(exc) in seen or not self._skip_file_of(exc):
                    raise
                seen.add(str(exc))
                self.create_views(con)
                continue
            # rows read while a compaction committed: again (a statement without rows is not repeated)
            if found[0] is not None and refreshed < VIEW_REFRESHES and self._refresh_stale_views(con):
                refreshed += 1
                continue
            return found

    def _create_view(self, con: duckdb.DuckDBPyConnection, table: str) -> None:
        import duckdb

        checked = footers_checked = False
        seen = set()
        while True:
            loose, parts, superseded = self._sources(table)
            if not loose and not parts:
                con.register(f"_empty_{table}", SCHEMAS[table].empty_table())
                con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM _empty_{table}")
                return
            selects = []
            if loose:
                files = ", ".join(f"'{sql_string(s)}'" for s in loose)
                selects.append(f"SELECT * FROM read_parquet([{files}], union_by_name = true)")
            if parts:  # compacted rows, less those of cells that have files of their own
                files = ", ".join(f"'{sql_string(duckdb_glob_escape(str(p)))}'" for p in parts)
                where = (" WHERE cell_id NOT IN (" + ", ".join(f"'{sql_string(c)}'" for c in sorted(superseded))
                         + ")") if superseded else ""
                selects.append(f"SELECT * FROM read_parquet([{files}], union_by_name = true){where}")
            source = "(" + " UNION ALL BY NAME ".join(selects) + ")"
            select = "SELECT DISTINCT ON (device_id) *" if table == "devices" else "SELECT *"  # devices: one file
            try:  # per sweep that used the device
                con.execute(f"CREATE OR REPLACE VIEW {table} AS {select} FROM {source}")
                return
            except duckdb.Error as exc:
                # Binding reads every file's footer (union_by_name), so a damaged file fails here:
                # only then are the table's files checked (their ends, ~15 µs a file), all at once;
                # and if DuckDB names no file (a garbled footer: "TProtocolException: Invalid
                # data"), their footers are parsed (~0.2 ms a file).
                repeated = str(exc) in seen
                seen.add(str(exc))
                if not checked:
                    checked = True
                    newly = False
                    for path in self._files(table):
                        if path not in self.layout.skipped and (problem := file_problem(path)):
                            self.layout.skip(path, problem)
                            newly = True
                    if newly or self._skip_file_of(exc, skip_new=False):
                        continue
                if not repeated and self._skip_file_of(exc):
                    continue
                if not footers_checked:
                    footers_checked = True
                    if self.skip_unreadable_footers(self._files(table)):
                        continue
                raise

    def skip_unreadable_footers(self, paths: Iterable[Path]) -> bool:
        """Skip those of `paths` whose footer does not parse; whether any was newly skipped."""
        newly = False
        for path in paths:
            if path in self.layout.skipped or file_problem(path):
                continue
            try:
                pq.read_metadata(path)
            except FileNotFoundError:
                continue
            except Exception as exc:  # noqa: BLE001 - whatever pyarrow says about the footer
                self.layout.skip(path, f"unreadable footer: {first_line(exc)}")
                newly = True
        return newly

    def cell_rows(self, sweep: str, table: str, cell_id: str, columns: list[str] | None = None) -> pa.Table | None:
        """One cell's rows of a per-cell table (`columns` of them, or all): from its own file where
        it has one, else from its compacted block (the block by its cell-id range, the rows by the
        file's row-group statistics); None where it has none. A damaged file is left out with a
        warning (`skip`)."""
        own = self.layout.table_dir(sweep, table) / f"{cell_id}.parquet"
        if own.is_file() or (self.layout.table_dir(sweep, "cells") / f"{cell_id}.parquet").is_file():
            paths, compacted = [own], False  # a cell with files of its own: never its compacted rows
        else:
            paths = [self.layout.table_dir(sweep, table) / b.name for b in self.layout.readable_compaction(sweep).blocks
                     if table in b.tables and b.first <= cell_id <= b.last]
            compacted = True
        for path in paths:
            if path in self.layout.skipped:
                continue
            try:
                if compacted:
                    found = pq.read_table(path, columns=columns, filters=[("cell_id", "=", cell_id)])
                else:
                    found = pq.read_table(path, columns=columns)
            except FileNotFoundError:  # removed since: a sweep is redoing the cell, or compacting it
                continue
            except Exception as exc:  # noqa: BLE001 - any reason a file cannot be read makes it damaged
                self.layout.skip(path, first_line(exc))
                continue
            if found.num_rows or not compacted:
                return found
        return None

    def _files(self, table: str) -> list[Path]:
        """The files a view of `table` may read: every per-cell file and the compacted ones that count."""
        found = []
        for sweep in self.layout.sweep_dirs():
            found += self.layout.loose_files(sweep.name, table)
            if table in COMPACTED_TABLES:
                found += [p for p in self.layout.part_files(sweep.name, table) if p.exists()]
        return found

    def _sources(self, table: str) -> tuple[list[str], list[Path], set[str]]:
        """What a view reads: per-cell files as DuckDB globs (glob characters in the path escaped):
        per sweep folder, its glob, or where it holds a file found damaged, a file that is not a
        regular file (a FIFO would block the read) or compacted files, its other per-cell files by
        name; the compacted files that count; and the cells whose compacted rows are left out
        (farm.warehouse.layout)."""
        loose: list[str] = []
        parts: list[Path] = []
        superseded: set[str] = set()
        for folder in self.layout.sweep_dirs():
            directory = folder / table
            names = parquet_names(directory, regular=False)
            for name, regular in names.items():
                if not regular:
                    self.layout.skip(directory / name, "not a regular file")
            found = self.layout.sources(folder.name, table)
            parts += found.parts
            superseded |= found.superseded
            # by name where a glob would not do: a damaged file skipped there, or a name starting
            # with "p" (compacted files, part-*, among them)
            if any(p.parent == directory for p in self.layout.skipped) or any(n.startswith("p") for n in names):
                loose += [duckdb_glob_escape(str(p)) for p in found.loose]
            elif names:  # never the compacted files a compaction may write there before this view's next query
                loose.append(duckdb_glob_escape(str(directory)) + "/[!p]*.parquet")
        return loose, parts, superseded

    def _skip_file_of(self, exc: Exception, skip_new: bool = True) -> bool:
        """Whether the error names a file of this warehouse that a retry can do without: one that
        is gone (a writer replaced it), skipped already, or (`skip_new`), now skipped, damaged.
        A file DuckDB did not find was gone when it was read, even where one of its name is there
        again (a compaction removed a cell's file and a rerun wrote it anew): never damaged."""
        if files_gone(exc, self.layout.root):
            return True
        for path in parquet_files_named(exc, self.layout.root):
            if not path.exists() or path in self.layout.skipped:
                return True
            if skip_new:
                self.layout.skip(path, first_line(exc))
                return True
        return False
