"""`Warehouse`: the only place results live, and how rows are written into it.

Layout: `<root>/<sweep>/<table>/<key>.parquet`, one file per cell per table (per run for
`sweeps`, per device for `devices`), until a sweep is compacted (farm.warehouse.compact), each written to a temporary
name and renamed into place,
so a crash loses at most the cell in flight and never leaves half a file. A cell's `cells` file
is written last: a cell counts as done only once it exists, and `repair` removes what a killed
run left of a cell without it. DuckDB reads the files through one view per table.

Writers give flat rows per table (`write_cell(sweep, cell_id, {table: rows})`), checked against
the table's schema (farm.warehouse.schema): an unknown column, or a required one missing, is an
error naming it, and nothing is written. Turning a cell's result into rows happens above the
storage, in farm.warehouse.rows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from farm.errors import UserError
from farm.files import write_error
from farm.warehouse.check import Finding
from farm.warehouse.compact import AUTO_COMPACT_CELLS, BLOCK_CELLS, Compacted, WarehouseCompaction
from farm.warehouse.consolidated import refresh_consolidated
from farm.warehouse.layout import Compaction, Warn
from farm.warehouse.parquet import write_parquet
from farm.warehouse.reader import WarehouseReader
from farm.warehouse.repair import Prepared
from farm.warehouse.schema import PER_CELL_TABLES, SCHEMA_VERSION, RowError, rows_table

Rows = list[dict[str, Any]] | pa.Table  # dicts; an Arrow table for a large table (samples)
# the order a cell's tables are written in: `cells` last marks the cell done
_CELL_WRITE_ORDER = ("builds", "measurements", "samples", "accuracy", "serving", "layers")


class Warehouse(WarehouseReader):
    """A results folder: writes rows atomically, reads them through DuckDB, resumes, repairs and
    checks itself; one writer at a time (`writer_lock`).

    What it reads is WarehouseReader's; the writes below are its own, or carried out by the parts
    that hold them: `locking` (the writer lock), `repairs` (resume, quarantine), `checks` (`farm
    check --fix`) and `compactor` (`farm compact`)."""

    def __init__(self, root: str | Path, warn: Warn | None = None) -> None:
        super().__init__(root, warn)
        self._compactor = WarehouseCompaction(self._layout, self._repairs, self._locking)

    # the writer lock (farm.warehouse.lock)
    @contextlib.contextmanager
    def writer_lock(self) -> Iterator[None]:
        """Hold the warehouse's writer lock (WarehouseBusy where another process holds it)."""
        with self._locking.writer_lock():
            yield

    def refuse_writer(self) -> None:
        """Raise NotAWarehouse where a writer must not write the folder."""
        self._locking.refuse_writer()

    def link_on_the_way(self, *parts: str) -> Path | None:
        """The first symbolic link on the way to root / parts, or None."""
        return self._layout.link_on_the_way(*parts)

    # resume and repair (farm.warehouse.repair)
    def prepare_sweep(self, sweep: str) -> Prepared:
        """Before a run writes `sweep`: what a killed run left removed, its finished cells."""
        return self._repairs.prepare_sweep(sweep)

    def repair(self, sweep: str) -> list[Path]:
        """Remove what a killed run left of cells without a `cells` file."""
        return self._repairs.repair(sweep)

    def quarantine(self, sweep: str, path: Path) -> list[tuple[Path, Path]]:
        """Move a damaged file (and its cell's others) out of the sweep."""
        return self._repairs.quarantine(sweep, path)

    def remove_leftovers(self) -> list[Path]:
        """Remove the temporary files and folders that runs left."""
        return self._repairs.remove_leftovers()

    def rebuilt_compaction(self, sweep: str) -> Compaction | None:
        return self._repairs.rebuilt_compaction(sweep)

    def write_compaction(self, sweep: str, compaction: Compaction) -> None:
        return self._repairs.write_compaction(sweep, compaction)

    # farm check --fix, farm compact (farm.warehouse.check, compact)
    def fix(self, findings: list[Finding]) -> list[tuple[Finding, str]]:
        """Repair what `inspect` found: each finding with what was done."""
        return self._checks.fix(findings)

    def compact(self, sweep: str, block_cells: int = BLOCK_CELLS) -> Compacted:
        """Gather a sweep's per-cell files into blocks (farm.warehouse.compact)."""
        return self._compactor.compact(sweep, block_cells)

    def write_sweep_run(self, row: dict[str, Any]) -> None:
        """Write (or rewrite) one run's `sweeps` row."""
        self.write_rows("sweeps", row["sweep_id"], row["run_id"], [row])

    def write_cell(self, sweep: str, cell_id: str, tables: Mapping[str, Rows]) -> None:
        """Write one cell: `tables` maps table names to rows, `cells` (one row) required, the
        per-cell tables and `devices` (keyed by their `device_id`) where the cell has them. Every
        row is checked before anything is touched (RowError names the column); then the cell is
        un-marked (a rerun replaces it), its tables written, and its `cells` row last, marking it
        done."""
        checked = self._checked_cell_tables(cell_id, tables)
        # A rerun replaces a cell: un-mark it done first, so a kill in between leaves no done cell
        # with missing or stale rows (repair then removes the leftovers).
        for table in ("cells", *PER_CELL_TABLES):
            path = self.table_dir(sweep, table) / f"{cell_id}.parquet"
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise write_error(path, exc) from None
        for table in _CELL_WRITE_ORDER:
            if table in checked:
                self._write_table(table, sweep, cell_id, checked[table])
        devices = checked.get("devices")
        if devices is not None:
            for device_id in dict.fromkeys(devices.column("device_id").to_pylist()):
                one = devices.filter(pc.equal(devices.column("device_id"), device_id))
                self._write_table("devices", sweep, device_id, one)
        self._write_table("cells", sweep, cell_id, checked["cells"])

    def _checked_cell_tables(self, cell_id: str, tables: Mapping[str, Rows]) -> dict[str, pa.Table]:
        unknown = sorted(set(tables) - {"cells", "devices", *PER_CELL_TABLES})
        if unknown:
            raise RowError(f"write_cell writes the cells, devices and per-cell tables, not {', '.join(unknown)}")
        checked = {table: rows_table(table, rows) for table, rows in tables.items()}
        if "cells" not in checked or checked["cells"].num_rows != 1:
            raise RowError(f"cell {cell_id}: write_cell needs exactly one cells row")
        for table, found in checked.items():
            if table != "devices" and pc.any(pc.not_equal(found.column("cell_id"), cell_id)).as_py():
                raise RowError(f"the {table} rows given for cell {cell_id} are of another cell")
        return checked

    def write_rows(self, table: str, sweep: str, key: str, rows: Rows) -> None:
        """Write `rows` (checked against the table's schema) as `<sweep>/<table>/<key>.parquet`."""
        self._write_table(table, sweep, key, rows_table(table, rows))

    def _write_table(self, table_name: str, sweep: str, key: str, table: pa.Table) -> None:
        directory = self.table_dir(sweep, table_name)
        link = self.link_on_the_way(sweep, table_name)
        if link is not None:
            raise UserError(f"{link} is a symbolic link: farm writes nothing through a link (it could lead out of "
                            "the warehouse); remove it, or choose another --results folder")
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(directory, exc) from None
        table = table.replace_schema_metadata({"farm.schema_version": str(SCHEMA_VERSION)})
        write_parquet(table, directory / f"{key}.parquet")

    def consolidate(self, sweep: str) -> None:
        """What a writer does as it ends (under the writer lock): compact the sweep once it has
        `AUTO_COMPACT_CELLS` cells in per-cell files (farm.warehouse.compact), and bring the
        consolidated copy of its small tables up to date (farm.warehouse.consolidated): the
        dashboard's first load is then quick."""
        if len(self.loose_files(sweep, "cells")) >= AUTO_COMPACT_CELLS:
            self.compact(sweep)
        refresh_consolidated(self, sweep)
