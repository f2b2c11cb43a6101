"""The consolidated copy behind the dashboard's load: reread only what changed, never stale."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from farm.dashboard.data import Snapshot
from farm.dashboard.loader import cache_path


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


def test_second_load_reads_no_cell_file_and_sees_every_change(warehouse: Path, tmp_path: Path) -> None:
    root = copy_of(warehouse, tmp_path)
    first = Snapshot(root)
    files = sum(1 for _ in (root / "dash").rglob("*.parquet")) - sum(
        1 for t in ("samples", "layers") for _ in (root / "dash" / t).glob("*.parquet"))
    assert first.files_read == files  # every small-table file, once
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
    assert Snapshot(root).files_read == 0


def test_damaged_copy_or_unwritable_cache_only_costs_time(warehouse: Path, tmp_path: Path) -> None:
    root = copy_of(warehouse, tmp_path)
    expected = len(Snapshot(root).cell_frame)
    cache_path(root, "dash", "cells").write_bytes(b"not parquet")
    snap = Snapshot(root)
    assert len(snap.cell_frame) == expected and snap.files_read >= expected

    unwritable = copy_of(warehouse, tmp_path / "ro")
    (unwritable / ".cache").write_text("a file where the cache folder would go")
    for _ in range(2):
        snap = Snapshot(unwritable)
        assert len(snap.cell_frame) == expected and snap.files_read >= expected  # no copy: reads every time
