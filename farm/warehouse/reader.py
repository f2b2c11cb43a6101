"""A warehouse handle for readers (the dashboard, `farm report`, `farm compare`, `farm query`,
`farm show`, `farm ls`): what they read, and no way to write.

It holds a `Warehouse` and lends out only the methods that read files or build in-memory DuckDB
views; asking it for anything else (`write_cell`, `writer_lock`, `compact`, `fix`, ...) raises
AttributeError naming the writer to use. Readers take one of these, so a page or a command that
promises never to write cannot, by mistake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# The reading half of Warehouse: paths, listings, reads of cells and plans, the checks that read
# (`inspect`, `not_a_warehouse`), the skipped-file bookkeeping kept in memory, and DuckDB views.
READ_METHODS = frozenset({
    "root", "cache_dir", "temp_dir", "warn", "skipped", "sweeps", "sweep_dirs", "table_dir", "table_files",
    "table_globs", "part_files", "loose_files", "sources", "readable_sources", "compaction", "readable_compaction",
    "manifests_stamp", "skip", "skip_unreadable_footers", "fetch", "stream", "cell_rows", "cell_statuses",
    "failure_reasons", "latest_plan", "unmeasured", "leftovers", "lock_holder", "not_a_warehouse", "inspect",
    "connect", "create_views",
})


class WarehouseReader:
    """`Warehouse(root)` for reading only (see the module's docstring)."""

    def __init__(self, root: str | Path, *args: Any, **kwargs: Any) -> None:
        from farm.warehouse.store import Warehouse

        self._warehouse = Warehouse(root, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name in READ_METHODS:
            return getattr(self._warehouse, name)
        raise AttributeError(f"a WarehouseReader cannot {name!r}: it only reads (writers take farm.warehouse.Warehouse)")
