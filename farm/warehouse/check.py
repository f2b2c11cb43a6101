"""`farm check`: every damaged, orphaned or leftover file of a warehouse (`inspect`), and `fix`.

`inspect` parses every file's footer and compares its schema with its table's, where readers
check only both ends of a file (and the footers only of a table DuckDB fails on).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from farm.files import write_error
from farm.warehouse.layout import COMPACTED_TABLES, MANIFEST_NAME, PART, ManifestUnreadable, WarehouseLayout
from farm.warehouse.lock import WarehouseLocking
from farm.warehouse.parquet import LINK_PROBLEM, file_problem, parquet_names, remove_path
from farm.warehouse.repair import WarehouseRepair
from farm.warehouse.schema import (
    DAMAGED_DIR_NAME,
    PER_CELL_TABLES,
    TABLES,
    UNMEASURED,
    cell_mismatch,
    samples_problem,
    schema_problem,
)

# how `fix` begins what it says of a finding it could not resolve (a write refused)
NOT_RESOLVED = "not resolved: "


@dataclasses.dataclass(frozen=True)
class Finding:
    """Something `farm check` found: `damaged` (not whole Parquet, or not the table's schema),
    `orphan` (a cell's file with no `cells` file, or a file or folder of no table), `temp`
    (a temporary file an interrupted run left), `unmeasured` (an ok cell's `cells` file with
    no measurements file: un-marked by --fix, so that the next sweep measures the cell again) or
    `link` (a symbolic link where a sweep, table or file would be: never followed; --fix leaves it)."""

    kind: str
    path: Path
    reason: str
    sweep: str | None = None


@dataclasses.dataclass
class Inspection:
    """What `farm check` found, and what it left alone."""

    findings: list[Finding]
    files_checked: int
    quarantined: int  # files already moved to .damaged folders
    in_progress: int  # temporary and unfinished-cell files left alone: a writer holds the lock
    holder: dict[str, Any] | None


class WarehouseCheck:
    """`farm check` (a part of the warehouse handles: farm.warehouse.reader, store)."""

    def __init__(self, layout: WarehouseLayout, repairs: WarehouseRepair, locking: WarehouseLocking) -> None:
        self.layout = layout
        self.repairs = repairs
        self.locking = locking

    def inspect(self) -> Inspection:
        """Every damaged file (not whole Parquet, footer unreadable, or not its table's schema),
        orphaned file and leftover temporary file of the warehouse: what `farm check` lists.
        Reads every file's footer (about 0.3 ms a file). While a writer holds the lock, its
        temporary files and unfinished cells are counted as in progress, not as findings."""
        holder = self.locking.lock_holder()
        findings: list[Finding] = []
        checked = quarantined = in_progress = 0
        findings += [Finding("link", entry, LINK_PROBLEM) for entry in self._root_entries()
                     if entry.is_symlink() and not entry.name.startswith(".")]
        for sweep_dir in self.layout.sweep_dirs():
            sweep = sweep_dir.name
            cells_present = parquet_names(sweep_dir / "cells")
            counted = self._counted_parts(sweep, findings)
            for entry in sorted(sweep_dir.iterdir()):
                if entry.is_symlink():
                    findings.append(Finding("link", entry, LINK_PROBLEM, sweep))
                    continue
                if entry.name == DAMAGED_DIR_NAME:
                    quarantined += sum(1 for p in entry.rglob("*") if p.is_file())
                    continue
                if entry.name == MANIFEST_NAME and entry.is_file():
                    continue
                if entry.name not in TABLES or not entry.is_dir():
                    what = "folder" if entry.is_dir() else "file"
                    findings.append(Finding("orphan", entry, f"a {what} of no warehouse table", sweep))
                    continue
                found, checked_here, waiting = self._table_folder(sweep, entry, cells_present, counted, holder)
                findings += found
                checked += checked_here
                in_progress += waiting
            damaged = {f.path for f in findings}
            findings += [Finding("unmeasured", path, UNMEASURED, sweep) for path in self.repairs.unmeasured(sweep)
                         if path not in damaged and (sweep_dir / "measurements" / path.name) not in damaged]
        cache = self.layout.cache_dir.absolute()
        for path in self.repairs.leftovers():
            if cache in path.absolute().parents:  # those of the table folders are listed above
                if holder is not None:
                    in_progress += 1
                else:
                    findings.append(Finding("temp", path, "temporary file or folder of an interrupted run"))
        return Inspection(findings, checked, quarantined, in_progress, holder)

    def _table_folder(self, sweep: str, entry: Path, cells_present: set[str], counted: set[tuple[str, str]] | None,
                      holder: dict[str, Any] | None) -> tuple[list[Finding], int, int]:
        """What `inspect` finds in one table folder: the findings, the files checked, and the files
        of a writer's work in progress (while one holds the lock)."""
        found: list[Finding] = []
        checked = waiting = 0
        for path in sorted(entry.iterdir()):
            if path.is_symlink():
                found.append(Finding("link", path, LINK_PROBLEM, sweep))
                continue
            if path.name.startswith(".") and ".tmp" in path.name:
                if holder is not None:
                    waiting += 1
                else:
                    found.append(Finding("temp", path, "temporary file of an interrupted write", sweep))
                continue
            if not path.name.endswith(".parquet") or not path.is_file():
                found.append(Finding("orphan", path, f"not a Parquet file of the {entry.name} table", sweep))
                continue
            compacted = PART.match(path.name) and entry.name in COMPACTED_TABLES
            if compacted and counted is not None and (entry.name, path.name) not in counted:
                why = f"compacted file of no block of {MANIFEST_NAME}: left by an interrupted compaction"
            elif not compacted and entry.name in PER_CELL_TABLES and path.name not in cells_present:
                why = "no cells file: left by an interrupted run"
            else:
                why = None
            if why:  # a writer's work in progress while one holds the lock
                waiting += holder is not None
                found += [Finding("orphan", path, why, sweep)] if holder is None else []
                continue
            checked += 1
            problem = file_problem(path) or schema_problem(path, entry.name)
            if not problem and not compacted and entry.name in ("cells", *PER_CELL_TABLES):
                problem = cell_mismatch(path)
            if not problem and entry.name == "samples":
                problem = samples_problem(path)
            if problem:
                found.append(Finding("damaged", path, problem, sweep))
        return found, checked, waiting

    def _fix_manifest(self, finding: Finding) -> str:
        """A damaged compaction.json: rebuilt from the compacted files where that can be told (the
        damaged one moved aside), else left as it is with every compacted file: a guess must never
        cost the blocks it lists."""
        rebuilt = self.repairs.rebuilt_compaction(finding.sweep)
        if rebuilt is None:
            return ("left as it is, and every compacted file with it: which blocks count cannot be told from the "
                    "files (restore it from a backup, or move the sweep's part-* files aside to measure them again)")
        moves = self.repairs.quarantine(finding.sweep, finding.path)
        self.repairs.write_compaction(finding.sweep, rebuilt)
        where = ", ".join(str(to.relative_to(self.layout.root)) for _, to in moves)
        return (f"rebuilt from its {len(rebuilt.blocks)} compacted block(s) ({sum(b.cells for b in rebuilt.blocks)} "
                f"cells); the damaged one moved to {where}")

    def _root_entries(self) -> list[Path]:
        try:
            return sorted(self.layout.root.iterdir())
        except OSError:
            return []

    def _counted_parts(self, sweep: str, findings: list[Finding]) -> set[tuple[str, str]] | None:
        """(table, name) of the sweep's compacted files that count; None (a finding) where its
        compaction.json does not parse."""
        try:
            compaction = self.layout.compaction(sweep)
        except ManifestUnreadable as exc:
            findings.append(Finding("damaged", self.layout.root / sweep / MANIFEST_NAME, f"unreadable: {exc}", sweep))
            return None
        return {(table, block.name) for block in compaction.blocks for table in block.tables}

    def fix(self, findings: list[Finding]) -> list[tuple[Finding, str]]:
        """Resolve what `inspect` found (only while holding the writer lock): damaged files are
        quarantined (their cells then count as not done), orphaned files and files of no table
        moved to `.damaged` too, unmeasured cells un-marked (their `cells` file moved there), and
        temporary files removed. Returns what was done to each."""
        done = []
        sweeps: set[str | None] = set()
        for finding in findings:
            try:
                done.append((finding, self._fix_one(finding, sweeps)))
            except OSError as exc:  # a folder this user may not write: said per file, the rest still tried
                done.append((finding, f"{NOT_RESOLVED}{write_error(exc.filename or finding.path, exc)}"))
        for sweep in sorted(s for s in sweeps if s):
            try:
                repaired = self.repairs.repair(sweep)  # the other files of the cells un-marked above
            except OSError:  # the moves above were refused too, and say so
                continue
            done += [(Finding("orphan", path, "a file of a cell un-marked above", sweep), "removed")
                     for path in repaired]
        return done

    def _fix_one(self, finding: Finding, sweeps: set[str | None]) -> str:
        """Resolve one finding (`fix`), adding its sweep to `sweeps` where a cell was un-marked;
        what was done, in words. OSError where a write is refused."""
        if finding.kind == "damaged" and finding.path.name == MANIFEST_NAME:
            sweeps.add(finding.sweep)
            return self._fix_manifest(finding)
        if finding.kind == "link":  # neither followed nor removed: whoever made it decides
            return "left as it is (farm never reads or writes through it): remove it if it should not be there"
        if finding.kind in ("damaged", "orphan", "unmeasured"):
            sweeps.add(finding.sweep)
            moves = sorted(self.repairs.quarantine(finding.sweep, finding.path), key=lambda m: m[0] != finding.path)
            where = ", ".join(str(to.relative_to(self.layout.root)) for _, to in moves) or "already gone"
            extra = " with its cell's cells file (measured again by the next sweep)" if len(moves) > 1 else \
                " (un-marked: the next sweep measures the cell again)" if finding.kind == "unmeasured" else ""
            return f"moved to {where}{extra}"
        remove_path(finding.path)
        return "removed"
