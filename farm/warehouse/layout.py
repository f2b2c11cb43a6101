"""Where a warehouse's files are: `<root>/<sweep>/<table>/<key>.parquet` (per cell), the compacted
files of a sweep (`<root>/<sweep>/<table>/part-GGGGGG-NNNN.parquet`, listed by the sweep's
`compaction.json`), the cache beside them, and the list of files readers skip as damaged. The
part of `Warehouse` every other part holds (`warehouse.layout`).

A cell's rows come from its own files where it has them, else from the compacted files: for a
table, compacted rows of a cell are left out when the cell has a `cells` file of its own or a
file of its own in that table (a cell redone after compaction supersedes its compacted rows);
a `cells` file that came or went while a reader listed the table does not count (`sources`).
Compacted files are immutable; `compaction.json`, written whole or not at all, is the one list
of those that count (`farm compact`, farm.warehouse.compact).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from farm.files import TEMP_DIR_NAME
from farm.warehouse.parquet import parquet_names
from farm.warehouse.schema import CACHE_DIR_NAME, PER_CELL_TABLES, TABLES

Warn = Callable[[str], None]
COMPACTED_TABLES = ("cells", *PER_CELL_TABLES)  # the tables compaction merges (not sweeps, devices)
MANIFEST_NAME = "compaction.json"  # <root>/<sweep>/compaction.json: the compacted files that count
PART = re.compile(r"^part-(\d{6})-(\d{4})\.parquet$")


def part_name(generation: int, number: int) -> str:
    return f"part-{generation:06d}-{number:04d}.parquet"


@dataclasses.dataclass(frozen=True)
class Block:
    """Compacted cells: one file per table (`part_name(generation, number)`) where they have rows;
    `first` and `last` the smallest and largest cell id, `cells` how many."""

    generation: int
    number: int
    cells: int
    first: str
    last: str
    tables: tuple[str, ...]

    @property
    def name(self) -> str:
        return part_name(self.generation, self.number)


@dataclasses.dataclass(frozen=True)
class Compaction:
    """A sweep's `compaction.json`: its generation and the blocks that count."""

    generation: int = 0
    blocks: tuple[Block, ...] = ()

    def to_json(self) -> str:
        return json.dumps({"format": 1, "generation": self.generation,
                           "blocks": [dataclasses.asdict(b) for b in self.blocks]}, indent=1) + "\n"


class ManifestUnreadable(ValueError):
    """A sweep's compaction.json that does not parse: its compacted rows are left out."""


@dataclasses.dataclass(frozen=True)
class Sources:
    """What a reader reads of one table of one sweep: its per-cell files, its compacted files,
    and the cells whose compacted rows those per-cell files supersede."""

    loose: list[Path]
    parts: list[Path]
    superseded: frozenset[str]


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
        """The table's files of one sweep, by name (compacted ones included); none through a link."""
        directory = self.table_dir(sweep, table)
        if self.link_on_the_way(sweep, table):
            return []
        return [directory / name for name in sorted(parquet_names(directory))]

    def link_on_the_way(self, *parts: str) -> Path | None:
        """The first of root/parts[0], root/parts[0]/parts[1], ... that is a symbolic link, or None.
        Nothing is read or written through one: it could lead out of the warehouse (a sweep folder
        linked to a folder elsewhere would have compaction and repairs work there)."""
        path = self.root
        for part in parts:
            path = path / part
            if path.is_symlink():
                return path
        return None

    def loose_files(self, sweep: str, table: str) -> list[Path]:
        """The table's per-cell (or per-run, per-device) files of one sweep, by name."""
        return [p for p in self.table_files(sweep, table) if not PART.match(p.name)]

    def compaction(self, sweep: str) -> Compaction:
        """The sweep's compaction.json (an empty one where it has none); ManifestUnreadable where
        it does not parse."""
        path = self.root / sweep / MANIFEST_NAME
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            blocks = tuple(Block(int(b["generation"]), int(b["number"]), int(b["cells"]), str(b["first"]),
                                 str(b["last"]), tuple(b["tables"])) for b in data["blocks"])
            return Compaction(int(data["generation"]), blocks)
        except FileNotFoundError:
            return Compaction()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ManifestUnreadable(f"{path}: {exc}") from None

    def readable_compaction(self, sweep: str) -> Compaction:
        """`compaction`, or an empty one with a warning (once) where it does not parse."""
        try:
            return self.compaction(sweep)
        except ManifestUnreadable as exc:
            path = self.root / sweep / MANIFEST_NAME
            if path not in self.skipped:
                self.skipped[path] = "unreadable"
                self.warn(f"skipped {exc}: the compacted cells of sweep {sweep} are left out; "
                          "`farm check` says more")
            return Compaction()

    def part_files(self, sweep: str, table: str, compaction: Compaction | None = None) -> list[Path]:
        """The compacted files of `table` that count (listed by compaction.json), present or not."""
        compaction = self.readable_compaction(sweep) if compaction is None else compaction
        return [self.table_dir(sweep, table) / b.name for b in compaction.blocks if table in b.tables]

    def sources(self, sweep: str, table: str, compaction: Compaction | None = None) -> Sources:
        """What readers read of `table` in `sweep` (the rule in this module's docstring); files
        found damaged are left out."""
        parts = [p for p in self.part_files(sweep, table, compaction) if p not in self.skipped and p.exists()] \
            if table in COMPACTED_TABLES else []
        # A cell's own `cells` file supersedes its compacted rows in every table. A writer writes a
        # cell's other tables before its `cells` file and removes that file first (a rerun, a
        # compaction): a cell whose `cells` file came or went while this table was listed would
        # have its compacted rows left out and its own not listed. So it supersedes here only where
        # the same `cells` file (inode and time) was there both before and after the listing.
        before = _marks(self.table_dir(sweep, "cells")) if parts and table != "cells" else {}
        every = self.loose_files(sweep, table)
        loose = [p for p in every if p not in self.skipped]
        if not parts:
            return Sources(loose, [], frozenset())
        after = _marks(self.table_dir(sweep, "cells")) if before else {}
        marked = {cell for cell, mark in before.items() if after.get(cell) == mark}
        return Sources(loose, parts, frozenset({p.stem for p in every} | marked))

    def sweep_dirs(self) -> list[Path]:
        """The sweeps' folders: the root's folders, dot folders aside, that hold at least one table
        folder (others are not sweeps: a nested warehouse, say, is left alone; a link to a folder is
        never one: `link_on_the_way`). The one rule every reader and writer goes by."""
        try:
            entries = sorted(p for p in self.root.iterdir()
                             if not p.name.startswith(".") and p.is_dir() and not p.is_symlink())
        except OSError:
            return []
        return [p for p in entries if any((p / t).is_dir() and not (p / t).is_symlink() for t in TABLES)]

    def sweeps(self) -> list[str]:
        """The sweeps' names (`sweep_dirs`)."""
        return [p.name for p in self.sweep_dirs()]

    def skip(self, path: Path, problem: str) -> None:
        """Note that readers leave `path` out, with a one-line warning (once per file)."""
        if path not in self.skipped:
            self.skipped[path] = problem
            what = ("damaged compacted file" if PART.match(path.name) else "damaged file")
            extra = (": the rows of its compacted cells in that table are left out; `farm check --fix` moves it "
                     "aside and the next sweep measures those cells again" if PART.match(path.name)
                     else "; `farm check --fix` moves it aside")
            self.warn(f"skipped {what} {path} ({problem}){extra}")


def _stems(directory: Path) -> list[str]:
    return [name[:-len(".parquet")] for name in parquet_names(directory) if not PART.match(name)]


def _marks(directory: Path) -> dict[str, tuple[int, int]]:
    """Each per-cell file's cell id and (inode, modification time): a file replaced or removed and
    written again since reads as another."""
    found = {}
    for stem in _stems(directory):
        try:
            st = os.stat(directory / f"{stem}.parquet")
        except OSError:
            continue
        found[stem] = (st.st_ino, st.st_mtime_ns)
    return found
