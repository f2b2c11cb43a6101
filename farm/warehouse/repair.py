"""Resume and repair: what a killed run left (temporary files, unfinished cells), damaged files
moved aside (quarantine), and the status of every finished cell.

A damaged file costs only its cell: writers move it to `<root>/<sweep>/.damaged/`, with its cell's
`cells` file, so that the next sweep measures the cell again. All of this only while holding the
writer lock: a running sweep's files look just the same.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pyarrow.parquet as pq

from farm.errors import first_line
from farm.files import TEMP_DIR_NAME, write_error
from farm.warehouse.layout import (
    COMPACTED_TABLES,
    MANIFEST_NAME,
    PART,
    Block,
    Compaction,
    ManifestUnreadable,
    WarehouseLayout,
    part_name,
)
from farm.warehouse.parquet import file_problem, free_name, parquet_names, remove_path
from farm.warehouse.schema import DAMAGED_DIR_NAME, PER_CELL_TABLES, TABLES, UNMEASURED

# farm's own temporary names: `.name.<pid>.tmp` (atomic writes; `.tmp.npz` for arrays) anywhere in
# the cache, and in the cache's temp area `name.<pid>.tmp` and quantize./verify. folders
_TEMP_FILE = re.compile(r"^\..+\.\d+\.tmp(\.npz)?$")
_TEMP_AREA_ENTRY = re.compile(r"^(\.?.+\.\d+\.tmp(\.npz)?|quantize\..+|verify\..+)$")
_WORK_ENTRY = re.compile(r"^[0-9a-f]{16}$")  # <cache>/work/<cell id>/


@dataclasses.dataclass
class Prepared:
    """What a writer found before running a sweep (see `Warehouse.prepare_sweep`)."""

    moved: list[tuple[Path, str, Path]]  # (damaged file, why, where it went)
    removed: list[Path]  # files of cells a killed run left unfinished, and their temporary files
    statuses: dict[str, str]  # status of every finished cell, by cell id


class WarehouseRepair:
    """Resume, repair and quarantine (a part of the warehouse handles: farm.warehouse.reader, store)."""

    def __init__(self, layout: WarehouseLayout) -> None:
        self.layout = layout

    def leftovers(self) -> list[Path]:
        """Temporary files and folders that runs left (killed, or failed before cleaning up), by
        farm's own names only: in the cache's temp area `name.<pid>.tmp` files and `quantize.*`,
        `verify.*` folders, in its work area the folders named by a cell id, `.name.<pid>.tmp`
        files anywhere in the cache, and temporary files in the sweeps' table folders. Leftovers
        only while no writer holds the lock."""
        found: list[Path] = []
        cache = self.layout.cache_dir
        areas = {cache / TEMP_DIR_NAME: _TEMP_AREA_ENTRY, cache / "work": _WORK_ENTRY}
        for area, names in areas.items():
            if area.is_dir() and not area.is_symlink():
                found += sorted(p for p in area.iterdir() if names.match(p.name))
        if cache.is_dir() and not cache.is_symlink():
            found += sorted(p for p in cache.rglob(".*.tmp*") if _TEMP_FILE.match(p.name)
                            and not any(a in p.parents for a in areas) and not p.is_dir())
        for sweep_dir in self.layout.sweep_dirs():
            for table in TABLES:
                found += sorted(p for p in (sweep_dir / table).glob(".*.tmp") if _TEMP_FILE.match(p.name))
        return found

    def remove_leftovers(self) -> list[Path]:
        """Remove `leftovers()`; only while holding the writer lock."""
        removed = self.leftovers()
        for path in removed:
            remove_path(path)
        return removed

    def repair(self, sweep: str) -> list[Path]:
        """Remove temporary files and rows of cells that a killed run left unfinished (only while
        holding the writer lock: a running sweep's files look just the same)."""
        removed = []
        sweep_dir = self.layout.root / sweep
        if not sweep_dir.is_dir():
            return removed
        for table in TABLES:
            for tmp in (sweep_dir / table).glob(".*.tmp"):
                tmp.unlink(missing_ok=True)
                removed.append(tmp)
        finished = {p.stem for p in self.layout.loose_files(sweep, "cells")}
        for table in PER_CELL_TABLES:
            for path in self.layout.loose_files(sweep, table):
                if path.stem not in finished:
                    path.unlink(missing_ok=True)
                    removed.append(path)
        return removed + self._repair_compacted(sweep)

    def _repair_compacted(self, sweep: str) -> list[Path]:
        """Remove compacted files that do not count: of no block of compaction.json (an interrupted
        or superseded compaction), or of a block whose `cells` file is gone (moved aside: its cells
        are measured again), the block then dropped from compaction.json. Nothing where
        compaction.json does not parse (`farm check` reports it)."""
        try:
            compaction = self.layout.compaction(sweep)
        except ManifestUnreadable:
            return []
        cells_dir = self.layout.table_dir(sweep, "cells")
        kept = tuple(b for b in compaction.blocks if "cells" in b.tables and (cells_dir / b.name).is_file())
        if kept != compaction.blocks:
            self.write_compaction(sweep, Compaction(compaction.generation, kept))
        counted = {(table, b.name) for b in kept for table in b.tables}
        removed = []
        for table in COMPACTED_TABLES:
            for path in self.layout.table_files(sweep, table):
                if PART.match(path.name) and (table, path.name) not in counted:
                    path.unlink(missing_ok=True)
                    removed.append(path)
        return removed

    def rebuilt_compaction(self, sweep: str) -> Compaction | None:
        """compaction.json made anew from the compacted files present, where that can be told: one
        generation of them (a finished compaction removes the older), each block with a readable
        `cells` file. None where it cannot (two generations: which counts is what the damaged file
        said), so that nothing is dropped on a guess."""
        found: dict[tuple[int, int], set[str]] = {}
        for table in COMPACTED_TABLES:
            for path in self.layout.table_files(sweep, table):
                if match := PART.match(path.name):
                    found.setdefault((int(match[1]), int(match[2])), set()).add(table)
        if len({generation for generation, _ in found}) != 1:
            return None
        blocks = []
        for (generation, number), tables in sorted(found.items()):
            path = self.layout.table_dir(sweep, "cells") / part_name(generation, number)
            if "cells" not in tables or file_problem(path):
                return None
            try:
                ids = pq.read_table(path, columns=["cell_id"]).column("cell_id").to_pylist()
            except Exception:  # noqa: BLE001 - unreadable: cannot be told
                return None
            blocks.append(Block(generation, number, len(ids), min(ids), max(ids),
                                tuple(t for t in COMPACTED_TABLES if t in tables)))
        return Compaction(blocks[0].generation, tuple(blocks)) if blocks and all(b.cells for b in blocks) else None

    def write_compaction(self, sweep: str, compaction: Compaction) -> None:
        """Write the sweep's compaction.json whole or not at all, flushed (writers only)."""
        from farm.files import write_atomic

        write_atomic(self.layout.root / sweep / MANIFEST_NAME, compaction.to_json(), fsync=True)

    def prepare_sweep(self, sweep: str) -> Prepared:
        """What a writer does before it runs cells of `sweep` (holding the writer lock): move every
        damaged file aside (quarantine: its cell is measured again), remove what a killed run
        left of unfinished cells, and read the status of every finished cell. A warehouse this
        user may not write (read-only files or mount) is one line that says so (a UserError)."""
        try:
            return self._prepare_sweep(sweep)
        except OSError as exc:
            raise write_error(exc.filename or self.layout.root / sweep, exc) from None

    def _prepare_sweep(self, sweep: str) -> Prepared:
        compaction = self.layout.readable_compaction(sweep)
        files = [p for table in TABLES for p in self.layout.loose_files(sweep, table)]
        files += [p for table in COMPACTED_TABLES for p in self.layout.part_files(sweep, table, compaction)]
        damaged = [(path, problem) for path in files if (problem := file_problem(path))]
        moved = []
        for path, problem in damaged:
            moved += [(path, problem, to) for source, to in self.quarantine(sweep, path) if source == path]
        statuses, unreadable = self._read_statuses(sweep)
        for path, problem in unreadable:  # whole at both ends, yet unreadable or of another schema
            moved += [(path, problem, to) for source, to in self.quarantine(sweep, path) if source == path]
        for path in self.unmeasured(sweep, statuses):  # measured again
            moved += [(path, UNMEASURED, to) for source, to in self.quarantine(sweep, path) if source == path]
            statuses.pop(path.stem, None)
        return Prepared(moved, self.repair(sweep), statuses)

    def unmeasured(self, sweep: str, statuses: dict[str, str] | None = None) -> list[Path]:
        """`cells` files of ok cells that have no measurements file (an older farm, killed while
        it quarantined a cell's file, left them so): un-marked, they are measured again. Ingested
        cells are left out (an ingested engine may have no measurement)."""
        measured = parquet_names(self.layout.table_dir(sweep, "measurements"))
        candidates = [p for p in self.layout.loose_files(sweep, "cells") if p.name not in measured]
        found = []
        for path in candidates:
            if statuses is not None and statuses.get(path.stem, "ok") != "ok" or file_problem(path):
                continue
            try:
                row = pq.read_table(path, columns=["status", "run_id"]).to_pylist()
            except Exception:  # noqa: BLE001 - damaged: found as such
                continue
            if row and row[0]["status"] == "ok" and row[0]["run_id"] != "ingest":
                found.append(path)
        return found

    def quarantine(self, sweep: str, path: Path) -> list[tuple[Path, Path]]:
        """Move a damaged file (or a folder of no table) to `<root>/<sweep>/.damaged/`, keeping its
        table folder's name; for a file of a cell, that cell's `cells` file goes too, so the cell
        counts as not done and the next sweep measures it again: it goes first, as `write_cell`
        un-marks a cell before it touches its files, so that a kill in between never leaves a
        done cell without the file. Only while holding the writer lock. Returns (from, to) of
        every move."""
        sources = [path]
        if PART.match(path.name):
            if path.parent.name in COMPACTED_TABLES and path in self.layout.part_files(sweep, path.parent.name):
                self._drop_block(sweep, path.name)  # un-marks its cells at once, as moving a cells file does
                if path.parent.name != "cells":
                    sources.insert(0, self.layout.table_dir(sweep, "cells") / path.name)
        elif _is_cell_file(path):
            sources.insert(0, self.layout.table_dir(sweep, "cells") / path.name)
        moves = []
        for source in sources:
            if not os.path.lexists(source):
                continue
            target_dir = self.layout.root / sweep / DAMAGED_DIR_NAME
            if source.parent != self.layout.root / sweep:
                target_dir = target_dir / source.parent.name
            target_dir.mkdir(parents=True, exist_ok=True)
            target = free_name(target_dir / source.name)
            os.replace(source, target)
            moves.append((source, target))
        return moves

    def _drop_block(self, sweep: str, name: str) -> None:
        """Leave the block of compacted file `name` out of compaction.json (its other files are then
        removed by `repair`)."""
        try:
            compaction = self.layout.compaction(sweep)
        except ManifestUnreadable:
            return
        kept = tuple(b for b in compaction.blocks if b.name != name)
        if kept != compaction.blocks:
            self.write_compaction(sweep, Compaction(compaction.generation, kept))

    def cell_statuses(self, sweep: str) -> dict[str, str]:
        """Status of every finished cell of a sweep, by cell id (unreadable `cells` files skipped,
        with a warning)."""
        statuses, unreadable = self._read_statuses(sweep)
        for path, problem in unreadable:
            self.layout.skip(path, problem)
        return statuses

    def failure_reasons(self, sweep: str) -> dict[str, str | None]:
        """The `reason` of every failed cell of a sweep, by cell id (per-cell files superseding
        compacted rows; unreadable files skipped, with a warning)."""
        found = self.layout.sources(sweep, "cells")
        reasons: dict[str, str | None] = {}
        for paths in (found.parts, found.loose):
            rows, unreadable = _read_columns(paths, ["cell_id", "status", "reason"])
            for path, problem in unreadable:
                self.layout.skip(path, problem)
            for cell_id, status, reason in rows:
                if status == "failed":
                    reasons[cell_id] = reason
                else:
                    reasons.pop(cell_id, None)
        return reasons

    def _read_statuses(self, sweep: str) -> tuple[dict[str, str], list[tuple[Path, str]]]:
        """Compacted cells' statuses (two columns of a few large files), then the per-cell files',
        which supersede them."""
        found = self.layout.sources(sweep, "cells")
        statuses, unreadable = self._statuses_of(found.parts)
        loose, bad = self._statuses_of(found.loose)
        statuses.update(loose)
        return statuses, unreadable + bad

    def _statuses_of(self, files: list[Path]) -> tuple[dict[str, str], list[tuple[Path, str]]]:
        rows, unreadable = _read_columns([p for p in files if p not in self.layout.skipped], ["cell_id", "status"])
        return dict(rows), unreadable


READ_FILES = 250  # files read at once by `_read_columns`


def _read_columns(files: list[Path], columns: list[str]) -> tuple[list[tuple], list[tuple[Path, str]]]:
    """`columns` of every row of `files` as tuples, in one read; file by file only when one of them
    fails (those are returned with why: unreadable)."""
    if not files:
        return [], []
    try:  # a few hundred files a read: one read of 3,000 small files took 285 MB, most of it their metadata
        found = []
        for start in range(0, len(files), READ_FILES):
            chunk = files[start:start + READ_FILES]
            table = pq.read_table(chunk if len(chunk) > 1 else chunk[0], columns=columns)
            found += zip(*(table.column(c).to_pylist() for c in columns))
        return found, []
    except Exception:  # noqa: BLE001 - which file: see below
        pass
    rows, unreadable = [], []
    for path in files:
        try:
            table = pq.read_table(path, columns=columns)
        except FileNotFoundError:
            continue
        except Exception as exc:  # noqa: BLE001 - any reason a file cannot be read makes it damaged
            unreadable.append((path, f"unreadable: {first_line(exc)}"))
            continue
        rows += zip(*(table.column(c).to_pylist() for c in columns))
    return rows, unreadable


def _is_cell_file(path: Path) -> bool:
    return path.parent.name in PER_CELL_TABLES and path.name.endswith(".parquet")
