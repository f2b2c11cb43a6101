"""Compaction: a sweep's per-cell files merged into a few large files per table.

One file per cell per table keeps writes atomic and resume simple, but reading 100,000 cells means
opening 700,000 files. `compact` merges a sweep's finished cells into blocks of `BLOCK_CELLS`
cells, one file per table a block (`<sweep>/<table>/part-GGGGGG-NNNN.parquet`, G the generation
that wrote it), and lists them in `<sweep>/compaction.json`, the commit point:

  1. (holding the writer lock) `prepare_sweep` first: damaged files aside, unfinished cells and
     compacted files that do not count removed;
  2. the new blocks are written (each file whole or not at all): the per-cell files' cells, and
     those of the blocks rewritten (blocks holding a cell redone since, or not full), less the
     rows those cells' per-cell files supersede;
  3. compaction.json is replaced (whole or not at all): from here on the new blocks count;
  4. the per-cell files compacted and the replaced blocks' files are removed.

A crash before 3 leaves the old files counting (the new blocks are of no block of
compaction.json: the next writer removes them); after 3, the per-cell files still present
supersede their compacted copies, which hold the same rows, so no row counts twice.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from farm.errors import UserError
from farm.files import write_atomic
from farm.warehouse.layout import COMPACTED_TABLES, Block, Compaction, ManifestUnreadable, WarehouseLayout, part_name
from farm.warehouse.lock import WarehouseLocking
from farm.warehouse.repair import WarehouseRepair
from farm.warehouse.schema import SCHEMA_VERSION, SCHEMAS

BLOCK_CELLS = 5000  # cells per compacted file: damage to one costs at most these cells' rows
AUTO_COMPACT_CELLS = 1000  # a sweep compacts itself as it ends once it has this many per-cell cells
ROW_GROUP_ROWS = 65536  # a cell's rows are found by row-group statistics (the files are sorted by cell id)
CHUNK_CELLS = 250  # cells read and written at a time while compacting: its memory is a chunk's, not a block's


@dataclasses.dataclass
class Compacted:
    """What `compact` did to one sweep."""

    sweep: str
    cells: int  # per-cell cells merged into blocks
    rewritten: int  # compacted cells rewritten (their blocks held a cell redone since, or were not full)
    files_removed: int
    blocks: int  # blocks counting now
    moved: list[tuple[Path, str, Path]]  # damaged files moved aside first (prepare_sweep)


class WarehouseCompaction:
    """`farm compact` (a part of the warehouse handles: farm.warehouse.reader, store)."""

    def __init__(self, layout: WarehouseLayout, repairs: WarehouseRepair, locking: WarehouseLocking) -> None:
        self.layout = layout
        self.repairs = repairs
        self.locking = locking

    def compact(self, sweep: str, block_cells: int = BLOCK_CELLS) -> Compacted:
        """Merge the sweep's per-cell files into compacted blocks (this module's docstring), holding
        the writer lock. Where nothing is per-cell, nothing is written."""
        with self.locking.writer_lock():
            prepared = self.repairs.prepare_sweep(sweep)
            try:
                old = self.layout.compaction(sweep)
            except ManifestUnreadable as exc:
                raise UserError(f"cannot compact sweep {sweep}: {exc} (move it aside and run `farm check`)") from None
            loose = sorted(p.stem for p in self.layout.loose_files(sweep, "cells"))
            if not loose:
                return Compacted(sweep, 0, 0, 0, len(old.blocks), prepared.moved)
            redone = set(loose)
            kept, rewrite, carried = [], [], []
            for block in old.blocks:
                ids = pq.read_table(self.layout.table_dir(sweep, "cells") / block.name, columns=["cell_id"]).column(0)
                ids = [c for c in ids.to_pylist() if c not in redone]
                if len(ids) < block.cells or block.cells < block_cells:
                    rewrite.append(block)
                    carried += ids
                else:
                    kept.append(block)
            generation = old.generation + 1
            order = sorted(set(carried) | redone)
            chunks = [order[i:i + block_cells] for i in range(0, len(order), block_cells)]
            blocks = [self._write_block(sweep, generation, n, chunk, rewrite, redone) for n, chunk in enumerate(chunks)]
            self.repairs.write_compaction(sweep, Compaction(generation, tuple(kept + blocks)))
            removed = 0
            for table in COMPACTED_TABLES:  # the commit is made: what it replaced goes
                for path in self.layout.loose_files(sweep, table):
                    if path.stem in redone:
                        path.unlink(missing_ok=True)
                        removed += 1
                for block in rewrite:
                    if table in block.tables:
                        (self.layout.table_dir(sweep, table) / block.name).unlink(missing_ok=True)
                        removed += 1
            return Compacted(sweep, len(loose), len(carried), removed, len(kept) + len(blocks), prepared.moved)

    def _write_block(self, sweep: str, generation: int, number: int, cell_ids: list[str],
                     rewrite: list[Block], redone: set[str]) -> Block:
        """Write one block's files: per table, the rows of `cell_ids`, those of cells in `redone`
        (the per-cell ones) from their per-cell files, the others from the blocks being rewritten;
        sorted by cell id, read and written `CHUNK_CELLS` cells at a time (a block's samples can be
        gigabytes, and thousands of small files' metadata add up: the memory a chunk needs)."""
        tables = []
        for table in COMPACTED_TABLES:
            directory = self.layout.table_dir(sweep, table)
            parts = [directory / b.name for b in rewrite if table in b.tables]
            carried = parts and any(c not in redone for c in cell_ids)
            if table != "cells" and not carried and not any((directory / f"{c}.parquet").is_file()
                                                             for c in cell_ids if c in redone):
                continue  # no rows of this table (its folder may not even exist): no file
            path = directory / part_name(generation, number)
            written: list[int] = []
            write_atomic(path, lambda tmp, d=directory, t=table, p=parts, n=written: n.append(_write_sorted(
                tmp, t, d, cell_ids, redone, p)), fsync=True)
            if written == [0] and table != "cells":  # files without rows: no file either
                path.unlink(missing_ok=True)
                continue
            tables.append(table)
        return Block(generation, number, len(cell_ids), cell_ids[0], cell_ids[-1], tuple(tables))


def _write_sorted(target: Path, table: str, directory: Path, cell_ids: list[str], redone: set[str],
                  parts: list[Path]) -> int:
    """Write the rows of `cell_ids` (sorted) of one table to `target`, a chunk of cells at a time:
    each from its per-cell file where it was redone, else from the compacted `parts`. Returns the
    rows written."""
    schema = SCHEMAS[table].with_metadata({"farm.schema_version": str(SCHEMA_VERSION)})
    written = 0
    with pq.ParquetWriter(target, schema) as writer:
        for start in range(0, len(cell_ids), CHUNK_CELLS):
            chunk = cell_ids[start:start + CHUNK_CELLS]
            own = [directory / f"{c}.parquet" for c in chunk if c in redone and (directory / f"{c}.parquet").is_file()]
            carried = pa.array([c for c in chunk if c not in redone], pa.string())
            pieces = [_read(own, table)] if own else []
            if parts and len(carried):
                pieces.append(_read(parts, table, pc.field("cell_id").isin(carried)))
            if not pieces:
                continue
            rows = pa.concat_tables(pieces).sort_by("cell_id")
            if rows.num_rows:
                writer.write_table(rows.replace_schema_metadata(schema.metadata), row_group_size=ROW_GROUP_ROWS)
                written += rows.num_rows
    return written


def _read(paths: list[Path], table: str, where: pc.Expression | None = None) -> pa.Table:
    """The rows of `paths` in the table's current schema (an older farm's files lack newer columns:
    nulls; older types are cast)."""
    return ds.dataset([str(p) for p in paths], schema=SCHEMAS[table], format="parquet").to_table(filter=where)
