"""The consolidated copy behind the dashboard's load: reread only what changed, never stale; the
dashboard's data layer writes nothing into the warehouse."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from farm.dashboard.data import Snapshot, fingerprint
from farm.warehouse import Warehouse
from farm.warehouse.consolidated import cache_path


def copy_of(warehouse: Path, tmp_path: Path) -> Path:
    root = tmp_path / "results"
    shutil.copytree(warehouse / "dash", root / "dash")
    return root


def rewrite(path: Path, **changes) -> None:
    """Replace a cell file the way the warehouse does (new file renamed over the old one)."""
    table = pq.read_table(path)
    for column, value in changes.items():
        index = table.column_names.index(column)
        table = table.set_column(index, column, pc.add(table.column(column), value))
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)


def listing(root: Path) -> dict[str, tuple]:
    """Every file and folder under `root` with its mtime (and a file's size): what any write changes."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            stat = path.lstat()
            found[str(path.relative_to(root))] = (stat.st_mtime_ns, stat.st_size if name in files else None)
    found["."] = (root.stat().st_mtime_ns, None)
    return found


def test_second_load_reads_no_cell_file_and_sees_every_change(warehouse: Path, tmp_path: Path) -> None:
    root = copy_of(warehouse, tmp_path)
    first = Snapshot(root)
    files = sum(1 for _ in (root / "dash").rglob("*.parquet")) - sum(
        1 for t in ("samples", "layers") for _ in (root / "dash" / t).glob("*.parquet"))
    assert first.files_read == files  # every small-table file, once
    assert not cache_path(root, "dash", "cells").exists()  # the dashboard writes no copy: writers do
    assert Snapshot(root).files_read == files

    Warehouse(root).consolidate("dash")  # what farm sweep, farm ingest and farm check --fix do
    assert cache_path(root, "dash", "cells").is_file()
    again = Snapshot(root)
    assert again.files_read == 0
    assert again.cell_frame.drop(columns="finished_at").equals(first.cell_frame.drop(columns="finished_at"))

    ok = first.cell_frame[first.cell_frame.status == "ok"].iloc[0]
    rewrite(root / "dash" / "measurements" / f"{ok.cell_id}.parquet", throughput_qps=1000.0)
    gone = first.cell_frame[first.cell_frame.status == "failed"].cell_id.iloc[0]
    (root / "dash" / "cells" / f"{gone}.parquet").unlink()
    third = Snapshot(root)
    assert third.files_read == 1  # the rewritten measurement; the removal needs no read
    assert third.cell(ok.cell_id).throughput_qps == ok.throughput_qps + 1000.0
    assert third.cell(gone) is None and len(third.cell_frame) == len(first.cell_frame) - 1
    assert Snapshot(root).files_read == 1  # still read from its file: the copy is the writers' to update
    Warehouse(root).consolidate("dash")
    assert Snapshot(root).files_read == 0


def test_damaged_copy_or_unwritable_cache_only_costs_time(warehouse: Path, tmp_path: Path) -> None:
    root = copy_of(warehouse, tmp_path)
    expected = len(Snapshot(root).cell_frame)
    Warehouse(root).consolidate("dash")
    cache_path(root, "dash", "cells").write_bytes(b"not parquet")
    snap = Snapshot(root)
    assert len(snap.cell_frame) == expected and snap.files_read >= expected

    unwritable = copy_of(warehouse, tmp_path / "ro")
    (unwritable / ".cache").write_text("a file where the cache folder would go")
    Warehouse(unwritable).consolidate("dash")  # no copy, no error
    for _ in range(2):
        snap = Snapshot(unwritable)
        assert len(snap.cell_frame) == expected and snap.files_read >= expected  # no copy: reads every time


def test_the_data_layer_writes_nothing_into_the_warehouse(warehouse: Path, tmp_path: Path) -> None:
    root = tmp_path / "results"
    shutil.copytree(warehouse, root)
    shutil.rmtree(root / ".cache", ignore_errors=True)  # no consolidated copy: the load that used to write one
    truncated = next((root / "dash" / "measurements").glob("*.parquet"))  # and a damaged file, skipped
    truncated.write_bytes(truncated.read_bytes()[:64])
    before = listing(root)
    snap = Snapshot(root)
    assert list(snap.damaged) == [truncated]
    for cell_id in snap.cell_frame.cell_id:
        snap.cell_file(cell_id, "samples")
        snap.cell_file(cell_id, "layers")
    fingerprint(root)
    Snapshot(root)
    assert listing(root) == before
