"""The warehouse: the only place results live (Parquet, one file per cell per table, DuckDB views).

A package of one concern per module, each a part `Warehouse` is made of (a part holds only the parts
it uses): `schema` (tables, columns, the row and file checks), `parquet` (whole-file checks and
writes), `layout` (paths), `lock` (one writer at a time, the marker), `repair` (resume, quarantine),
`check` (`farm check`), `views` (DuckDB), `compact` (`farm compact`), `consolidated` (the
dashboard's quick-load copy); `reader` (`WarehouseReader`: the parts' reads as declared methods, the
handle readers get, which cannot write) and `store` (`Warehouse`: a WarehouseReader that also writes
rows, holds the writer lock, repairs and compacts). `rows` turns a cell's result into rows; it sits
above the storage (the storage never imports it).
"""

from farm.files import TEMP_DIR_NAME
from farm.warehouse.check import Finding, Inspection
from farm.warehouse.layout import Warn, warn_stderr
from farm.warehouse.lock import NotAWarehouse, WarehouseBusy, describe_holder
from farm.warehouse.parquet import (
    PARQUET_MAGIC,
    duckdb_glob_escape,
    file_problem,
    parquet_files_named,
    sql_string,
    write_file,
    write_parquet,
)
from farm.warehouse.reader import WarehouseReader
from farm.warehouse.repair import Prepared
from farm.warehouse.schema import (
    CACHE_DIR_NAME,
    DAMAGED_DIR_NAME,
    KEPT_STATUSES,
    KEY_COLUMNS,
    LOCK_NAME,
    MARKER_NAME,
    PER_CELL_TABLES,
    REQUIRED_COLUMNS,
    SCHEMA_VERSION,
    SCHEMAS,
    TABLES,
    UNMEASURED,
    RowError,
    schema_problem,
)
from farm.warehouse.store import Warehouse

__all__ = [
    "CACHE_DIR_NAME", "DAMAGED_DIR_NAME", "KEPT_STATUSES", "KEY_COLUMNS", "LOCK_NAME", "MARKER_NAME", "PARQUET_MAGIC",
    "PER_CELL_TABLES", "REQUIRED_COLUMNS", "SCHEMA_VERSION", "SCHEMAS", "TABLES", "TEMP_DIR_NAME", "UNMEASURED",
    "Finding", "Inspection", "NotAWarehouse", "Prepared", "RowError", "Warehouse", "WarehouseBusy", "WarehouseReader", "Warn",
    "describe_holder", "duckdb_glob_escape", "file_problem", "parquet_files_named", "schema_problem", "sql_string",
    "warn_stderr", "write_file", "write_parquet",
]
