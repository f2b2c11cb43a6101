"""Where a warehouse's files are: `<root>/<sweep>/<table>/<key>.parquet`, the cache beside them,
and the list of files readers skip as damaged. The base of `Warehouse`."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable

from farm.warehouse.parquet import parquet_names
from farm.warehouse.schema import CACHE_DIR_NAME, TABLES, TEMP_DIR_NAME

Warn = Callable[[str], None]


def warn_stderr(message: str) -> None:
    print(f"farm: warning: {message}", file=sys.stderr)


class WarehouseLayout:
    """A results folder's paths, and the damaged files its readers leave out."""

    def __init__(self, root: str | Path, warn: Warn | None = None) -> None:
        # absolute, so that every path it names (to DuckDB, in `skipped`, in DuckDB's errors) is
        # spelled the same whatever the current folder; `..` and `.` removed, links kept
        self.root = Path(os.path.abspath(root))
        self.warn = warn or warn_stderr
        self.skipped: dict[Path, str] = {}  # damaged files readers skipped, with why

    @property
    def cache_dir(self) -> Path:
        """Zoo models, work folders and (later) engine and timing caches."""
        return self.root / CACHE_DIR_NAME

    @property
    def temp_dir(self) -> Path:
        """Where a run keeps its temporary files; emptied by the next writer (under the lock)."""
        return self.cache_dir / TEMP_DIR_NAME

    def table_dir(self, sweep: str, table: str) -> Path:
        return self.root / sweep / table

    def table_files(self, sweep: str, table: str) -> list[Path]:
        """The table's files of one sweep, by name."""
        directory = self.table_dir(sweep, table)
        return [directory / name for name in sorted(parquet_names(directory))]

    def sweep_dirs(self) -> list[Path]:
        """The sweeps' folders: the root's folders, dot folders aside, that hold at least one table
        folder (others are not sweeps: a nested warehouse, say, is left alone). The one rule every
        reader and writer goes by."""
        try:
            entries = sorted(p for p in self.root.iterdir() if not p.name.startswith(".") and p.is_dir())
        except OSError:
            return []
        return [p for p in entries if any((p / t).is_dir() for t in TABLES)]

    def sweeps(self) -> list[str]:
        """The sweeps' names (`sweep_dirs`)."""
        return [p.name for p in self.sweep_dirs()]

    def skip(self, path: Path, problem: str) -> None:
        """Note that readers leave `path` out, with a one-line warning (once per file)."""
        if path not in self.skipped:
            self.skipped[path] = problem
            self.warn(f"skipped damaged file {path} ({problem}); `farm check --fix` moves it aside")
