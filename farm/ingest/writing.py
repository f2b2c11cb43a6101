"""Ingested cells into the warehouse: their `cells` row also says which machine imported them,
and a cell whose write fails is removed whole (no partial cell is left behind)."""

from __future__ import annotations

import socket
from pathlib import Path

from farm import __version__
from farm.ingest.combine import EngineIngest
from farm.warehouse import PER_CELL_TABLES, Warehouse
from farm.warehouse.rows import cell_tables


def ingested_on() -> str:
    """The importing machine, for the `cells.ingested_on` column: host name and farm version."""
    return f"{socket.gethostname()} (farm {__version__})"


class IngestWarehouse(Warehouse):
    """The warehouse, writing ingested cells: their `cells` row also says which machine imported
    them, and a cell whose write fails is removed whole (no partial cell is left behind)."""

    def __init__(self, root: str | Path, imported_by: str | None = None) -> None:
        super().__init__(root)
        self.imported_by = imported_by or ingested_on()

    def write_engine(self, engine: EngineIngest) -> None:
        cell, result = engine.cell, engine.result
        device_file = self.table_dir(cell.sweep, "devices") / f"{result.device['device_id']}.parquet" \
            if result.device else None
        device_existed = device_file is not None and device_file.exists()
        try:
            tables = cell_tables(cell, result, "ingest", "")
            tables["cells"][0]["ingested_on"] = self.imported_by
            self.write_cell(cell.sweep, cell.cell_id, tables)
        except BaseException:
            for table in ("cells", *PER_CELL_TABLES):
                directory = self.table_dir(cell.sweep, table)
                (directory / f"{cell.cell_id}.parquet").unlink(missing_ok=True)
                for tmp in directory.glob(f".{cell.cell_id}.parquet.*.tmp"):
                    tmp.unlink(missing_ok=True)
            if device_file is not None and not device_existed:
                device_file.unlink(missing_ok=True)
            raise
