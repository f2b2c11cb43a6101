"""Many cells' rows of a big per-cell table (samples, layers) of one sweep, in one DuckDB query
over that sweep's files only: each cell's own file where it has one, else its compacted block's
rows (farm.warehouse.layout's rule, as `cell_rows` reads one cell), in each cell's file
order. A comparison of two 2,500-cell sweeps reads 5,000 cells' samples in one query, not 5,000
reads of a compacted block (16 s). Damaged files are left out with a warning, as every reader does;
files that were gone when DuckDB read them (a compaction ran meanwhile) are listed again."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from farm.errors import first_line
from farm.warehouse.parquet import duckdb_glob_escape, file_problem, files_gone, parquet_files_named, sql_string

if TYPE_CHECKING:
    from pathlib import Path

# How often the sweep's files are listed again when some were gone before DuckDB read them
RELISTS = 3


def _paths(paths: Iterable[Path]) -> str:
    return "[" + ", ".join(f"'{sql_string(duckdb_glob_escape(str(p)))}'" for p in paths) + "]"


def read_cell_rows(warehouse: Any, sweep: str, table: str, cell_ids: list[str], columns: list[str],
                   optional: tuple[str, ...] = (), numbered: bool = False) -> pa.Table | None:
    """`cell_id` and `columns` of `table` for `cell_ids` in `sweep`, ordered by cell and then as
    stored; None where none of them has rows. `optional` columns read as NULL where no file has
    them (an older farm's files). `numbered`: `cell_number` (the cell's position in `cell_ids`,
    which must be distinct) in place of `cell_id`, rows in that order: no strings to group by.
    `warehouse`: a WarehouseReader (its `rows_of_cells` is this)."""
    import duckdb

    wanted = dict.fromkeys(cell_ids)
    con = duckdb.connect(":memory:")
    con.execute("SET enable_progress_bar = false")  # a slow read draws no bar into farm compare's output
    con.register("_wanted", pa.table({"cell_id": pa.array(list(wanted), pa.string()),
                                      "cell_number": pa.array(range(len(wanted)), pa.int32())}))
    try:
        for _ in range(RELISTS):
            try:
                return _read(con, warehouse, sweep, table, wanted, columns, optional, numbered)
            except duckdb.Error as exc:
                # files listed, then gone before DuckDB read them (a compaction or a rerun moved
                # them): never damaged; list the sweep's files again
                if not files_gone(exc, warehouse.root):
                    raise
        return _read(con, warehouse, sweep, table, wanted, columns, optional, numbered)
    finally:
        con.close()


def _read(con: Any, warehouse: Any, sweep: str, table: str, wanted: dict[str, None], columns: list[str],
          optional: tuple[str, ...], numbered: bool) -> pa.Table | None:
    """One listing of the sweep's files and the query over them, damaged files left out."""
    import duckdb

    found = warehouse.sources(sweep, table)
    own = [p for p in found.loose if p.stem in wanted]
    parts = list(found.parts)
    for path in own + parts:
        problem = None if path in warehouse.skipped else file_problem(path)
        if problem:
            warehouse.skip(path, problem)
    con.register("_superseded", pa.table({"cell_id": pa.array(sorted(found.superseded), pa.string())}))
    while True:
        own = [p for p in own if p not in warehouse.skipped]
        parts = [p for p in parts if p not in warehouse.skipped]
        if not own and not parts:
            return None
        try:
            present = _columns(con, own + parts) if optional else set(columns)
            return con.sql(_sql(own, parts, columns, optional, present, numbered)).to_arrow_table()
        except duckdb.Error as exc:  # damaged inside: the file it names, or those whose footer fails
            if files_gone(exc, warehouse.root):
                raise
            named = [p for p in parquet_files_named(exc, warehouse.root) if p in own or p in parts]
            for path in named:
                warehouse.skip(path, first_line(exc))
            if not named and not warehouse.skip_unreadable_footers(own + parts):
                raise


def _columns(con: Any, paths: list[Path]) -> set[str]:
    """The columns the files have (their footers' union)."""
    names = con.execute(f"SELECT DISTINCT name FROM parquet_schema({_paths(paths)})").fetchall()
    return {n for (n,) in names}


def _sql(own: list[Path], parts: list[Path], columns: list[str], optional: tuple[str, ...], present: set[str],
         numbered: bool = False) -> str:
    select = ", ".join(f'"{c}"' if c in present or c not in optional else f'NULL AS "{c}"' for c in columns)
    options = "union_by_name = true, filename = true, file_row_number = true"
    selects = []
    if own:
        selects.append(f"SELECT cell_id, {select}, filename, file_row_number FROM read_parquet({_paths(own)}, "
                       f"{options}) WHERE cell_id IN (SELECT cell_id FROM _wanted)")
    if parts:  # compacted rows, less those of cells that have files of their own
        selects.append(f"SELECT cell_id, {select}, filename, file_row_number FROM read_parquet({_paths(parts)}, "
                       f"{options}) WHERE cell_id IN (SELECT cell_id FROM _wanted) "
                       "AND cell_id NOT IN (SELECT cell_id FROM _superseded)")
    names = ", ".join(f'"{c}"' for c in columns)
    if numbered:
        return (f"SELECT cell_number, {names} FROM ({' UNION ALL '.join(selects)}) JOIN _wanted USING (cell_id) "
                "ORDER BY cell_number, filename, file_row_number")
    return (f"SELECT cell_id, {names} FROM ({' UNION ALL '.join(selects)}) "
            "ORDER BY cell_id, filename, file_row_number")
