"""Atomic files, repair after a kill, and DuckDB views over an empty or partial warehouse."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from farm.warehouse import SCHEMAS, TABLES, Warehouse, write_atomic


def test_write_atomic_leaves_only_the_final_file(tmp_path: Path) -> None:
    table = pa.table({"a": [1, 2]})
    write_atomic(table, tmp_path / "x.parquet")
    write_atomic(pa.table({"a": [3]}), tmp_path / "x.parquet")  # replaces in place
    assert [p.name for p in tmp_path.iterdir()] == ["x.parquet"]
    assert pq.read_table(tmp_path / "x.parquet").column("a").to_pylist() == [3]


def test_empty_warehouse_has_every_table_with_its_columns(tmp_path: Path) -> None:
    con = Warehouse(tmp_path / "nothing").connect()
    for table in TABLES:
        columns = [d[0] for d in con.execute(f"SELECT * FROM {table}").description]
        assert columns == SCHEMAS[table].names
        assert con.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,)


def test_repair_removes_leftovers_of_unfinished_cells(tmp_path: Path) -> None:
    warehouse = Warehouse(tmp_path)
    for table, key in [("cells", "done"), ("measurements", "done"), ("measurements", "half"), ("samples", "half")]:
        directory = warehouse.table_dir("s", table)
        directory.mkdir(parents=True, exist_ok=True)
        pq.write_table(SCHEMAS[table].empty_table(), directory / f"{key}.parquet")
    (warehouse.table_dir("s", "layers")).mkdir()
    tmp = warehouse.table_dir("s", "layers") / ".half.parquet.123.tmp"
    tmp.write_bytes(b"PAR1 half written")
    removed = warehouse.repair("s")
    assert {p.name for p in removed} == {"half.parquet", ".half.parquet.123.tmp"}
    assert (warehouse.table_dir("s", "measurements") / "done.parquet").exists()
    assert not tmp.exists()


def test_devices_view_deduplicates_across_sweeps(tmp_path: Path) -> None:
    warehouse = Warehouse(tmp_path)
    row = {"device_id": "cpu-1", "kind": "cpu", "name": "CPU"}
    for sweep in ("a", "b"):
        warehouse._write("devices", sweep, "cpu-1", [row])
    assert warehouse.connect().execute("SELECT count(*) FROM devices").fetchone() == (1,)


def test_cell_keyed_tables_share_only_the_cell_id() -> None:
    """So that `JOIN ... USING (cell_id)` never makes a column name ambiguous."""
    seen: dict[str, str] = {}
    for table in ("cells", "builds", "measurements", "samples", "layers"):
        for column in SCHEMAS[table].names:
            if column != "cell_id":
                assert column not in seen, f"{column} is in both {seen.get(column)} and {table}"
                seen[column] = table
