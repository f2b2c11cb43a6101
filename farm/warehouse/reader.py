"""`WarehouseReader`: a results folder for readers (the dashboard, `farm report`, `farm compare`,
`farm query`, `farm show`, `farm ls`): what they read, and no way to write.

Its methods are the reading half of the warehouse, each declared here and carried out by one of
the parts (farm.warehouse.layout, lock, repair, check, views). `Warehouse` (farm.warehouse.store)
extends it with the writes; a page or a command that promises never to write holds a
WarehouseReader, so it cannot, by mistake: asking it for a write (`write_cell`, `writer_lock`,
`compact`, `fix`, ...) raises AttributeError naming the writer to use."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from farm.warehouse.check import Inspection, WarehouseCheck
from farm.warehouse.layout import Compaction, Sources, WarehouseLayout, Warn
from farm.warehouse.lock import WarehouseLocking
from farm.warehouse.repair import WarehouseRepair
from farm.warehouse.views import STREAM_ROWS, WarehouseViews

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

# what a reader is asked for that only a Warehouse does: said as such, not as a typo
WRITE_METHODS = frozenset({
    "write_cell", "write_rows", "write_sweep_run", "consolidate", "writer_lock", "refuse_writer", "link_on_the_way",
    "prepare_sweep", "quarantine", "rebuilt_compaction", "remove_leftovers", "repair", "write_compaction", "fix",
    "compact",
})


class WarehouseReader:
    """A results folder, read: its paths and listings, cells and plans, the checks that only read,
    and DuckDB views of its tables (see the module's docstring)."""

    def __init__(self, root: str | Path, warn: Warn | None = None) -> None:
        self._layout = WarehouseLayout(root, warn)
        self._locking = WarehouseLocking(self._layout)
        self._repairs = WarehouseRepair(self._layout)
        self._checks = WarehouseCheck(self._layout, self._repairs, self._locking)
        self._views = WarehouseViews(self._layout)

    def __getattr__(self, name: str) -> Any:  # only reached for a name the class lacks: no dispatch
        if name in WRITE_METHODS:
            raise AttributeError(f"a WarehouseReader cannot {name!r}: it only reads (writers take "
                                 "farm.warehouse.Warehouse)")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # paths and listings (farm.warehouse.layout)
    @property
    def root(self) -> Path:
        """The folder, absolute."""
        return self._layout.root

    @property
    def warn(self) -> Warn:
        """Where one-line warnings about damaged files go."""
        return self._layout.warn

    @property
    def skipped(self) -> dict[Path, str]:
        """Damaged files readers left out, with why."""
        return self._layout.skipped

    @property
    def cache_dir(self) -> Path:
        """Zoo models, work folders and engine and timing caches."""
        return self._layout.cache_dir

    @property
    def temp_dir(self) -> Path:
        """Where a run keeps its temporary files."""
        return self._layout.temp_dir

    def sweeps(self) -> list[str]:
        """The sweeps' names."""
        return self._layout.sweeps()

    def sweep_dirs(self) -> list[Path]:
        """The sweeps' folders (WarehouseLayout.sweep_dirs: the one rule)."""
        return self._layout.sweep_dirs()

    def table_dir(self, sweep: str, table: str) -> Path:
        return self._layout.table_dir(sweep, table)

    def table_files(self, sweep: str, table: str) -> list[Path]:
        """The table's files of one sweep, compacted ones included."""
        return self._layout.table_files(sweep, table)

    def loose_files(self, sweep: str, table: str) -> list[Path]:
        """The table's per-cell (or per-run, per-device) files of one sweep."""
        return self._layout.loose_files(sweep, table)

    def part_files(self, sweep: str, table: str, compaction: Compaction | None = None) -> list[Path]:
        """The compacted files of `table` that count, present or not."""
        return self._layout.part_files(sweep, table, compaction)

    def sources(self, sweep: str, table: str, compaction: Compaction | None = None) -> Sources:
        """What readers read of `table` in `sweep`, damaged files left out."""
        return self._layout.sources(sweep, table, compaction)

    def compaction(self, sweep: str) -> Compaction:
        """The sweep's compaction.json (ManifestUnreadable where it does not parse)."""
        return self._layout.compaction(sweep)

    def readable_compaction(self, sweep: str) -> Compaction:
        """`compaction`, or an empty one with a warning where it does not parse."""
        return self._layout.readable_compaction(sweep)

    def skip(self, path: Path, problem: str) -> None:
        """Leave `path` out of what is read, with a one-line warning (once per file)."""
        self._layout.skip(path, problem)

    # cells and plans (farm.warehouse.repair, views)
    def cell_statuses(self, sweep: str) -> dict[str, str]:
        """Status of every finished cell of a sweep, by cell id."""
        return self._repairs.cell_statuses(sweep)

    def failure_reasons(self, sweep: str) -> dict[str, str | None]:
        """The `reason` of every failed cell of a sweep, by cell id."""
        return self._repairs.failure_reasons(sweep)

    def unmeasured(self, sweep: str, statuses: dict[str, str] | None = None) -> list[Path]:
        """`cells` files of ok cells that have no measurements file."""
        return self._repairs.unmeasured(sweep, statuses)

    def leftovers(self) -> list[Path]:
        """Temporary files and folders that runs left."""
        return self._repairs.leftovers()

    def latest_plan(self, sweep: str) -> list[str] | None:
        """The cell ids the sweep's latest run planned, or None."""
        return self._views.latest_plan(sweep)

    def cell_rows(self, sweep: str, table: str, cell_id: str, columns: list[str] | None = None) -> pa.Table | None:
        """One cell's rows of a table, or None."""
        return self._views.cell_rows(sweep, table, cell_id, columns)

    def rows_of_cells(self, sweep: str, table: str, cell_ids: list[str], columns: list[str],
                      optional: tuple[str, ...] = (), numbered: bool = False) -> pa.Table | None:
        """`cell_id` and `columns` of a big per-cell table (samples, layers) for many cells of one
        sweep in one query, ordered by cell and then as stored; None where none has rows
        (farm.warehouse.bulk: `optional` columns, `numbered` cells)."""
        from farm.warehouse.bulk import read_cell_rows

        return read_cell_rows(self, sweep, table, cell_ids, columns, optional, numbered)

    # checks that only read (farm.warehouse.lock, check)
    def lock_holder(self) -> dict[str, Any] | None:
        """Who holds the writer lock, or None when no other process does."""
        return self._locking.lock_holder()

    def not_a_warehouse(self) -> str | None:
        """Why a writer must not write the folder, or None when it is a warehouse."""
        return self._locking.not_a_warehouse()

    def inspect(self) -> Inspection:
        """Every damaged file and leftover (`farm check`, reading only)."""
        return self._checks.inspect()

    # DuckDB (farm.warehouse.views)
    def connect(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB connection with a view per table."""
        return self._views.connect()

    def create_views(self, con: duckdb.DuckDBPyConnection) -> None:
        """(Re)create the tables' views on `con`."""
        self._views.create_views(con)

    def fetch(self, con: duckdb.DuckDBPyConnection, sql: str, params: Any = None
              ) -> tuple[list[str] | None, list[tuple[Any, ...]]]:
        """Run `sql` on `con`: its columns and rows, damaged files skipped."""
        return self._views.fetch(con, sql, params)

    def stream(self, con: duckdb.DuckDBPyConnection, sql: str, params: Any = None, size: int = STREAM_ROWS
               ) -> tuple[list[str] | None, Iterator[list[tuple[Any, ...]]]]:
        """`fetch` a chunk of at most `size` rows at a time."""
        return self._views.stream(con, sql, params, size)

    def table_globs(self, table: str) -> list[str]:
        """The DuckDB globs a table's view reads."""
        return self._views.table_globs(table)

    def readable_sources(self, table: str) -> tuple[list[Path], list[Path], set[str]]:
        """Every sweep's readable files of `table` and the compacted rows they supersede."""
        return self._views.readable_sources(table)

    def manifests_stamp(self) -> tuple:
        """What changes when a sweep is compacted or written: views made before are stale."""
        return self._views.manifests_stamp()

    def skip_unreadable_footers(self, paths: Iterable[Path]) -> bool:
        """Skip those of `paths` whose Parquet footer cannot be read; whether any was."""
        return self._views.skip_unreadable_footers(paths)
