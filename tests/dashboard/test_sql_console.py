"""The SQL console reads the warehouse and nothing else, writes nowhere, and stops at its limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.dashboard.sql import QueryRefused, run_query


def refused(results: Path, sql: str, **limits) -> str:
    with pytest.raises(QueryRefused) as info:
        run_query(results, sql, **limits)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_reads_every_warehouse_table(warehouse: Path) -> None:
    result = run_query(warehouse, "SELECT status, count(*) AS n FROM cells WHERE sweep_id = 'dash' "
                                  "GROUP BY 1 ORDER BY 1")
    assert result.frame.to_dict("records") == [{"status": "failed", "n": 6}, {"status": "ok", "n": 6},
                                               {"status": "unsupported", "n": 6}]
    for table in ("sweeps", "builds", "measurements", "samples", "layers", "accuracy", "devices"):
        assert len(run_query(warehouse, f"SELECT * FROM {table}").frame) > 0, table
    pivot = run_query(warehouse, "PIVOT (SELECT precision, batch, throughput_qps FROM cells JOIN measurements "
                                 "USING (cell_id) WHERE sweep_id = 'dash') ON precision USING first(throughput_qps)")
    assert sorted(pivot.frame.columns) == ["batch", "fp16", "fp32"] and len(pivot.frame) == 3
    assert len(run_query(warehouse, "EXPLAIN SELECT * FROM cells").frame) >= 1
    # the warehouse's own files can be read directly too
    sweep_dir = warehouse / "dash" / "cells"
    assert run_query(warehouse, f"SELECT count(*) AS n FROM read_parquet('{sweep_dir}/*.parquet')").frame.n[0] == 18


def test_files_outside_the_warehouse_are_refused(warehouse: Path, tmp_path: Path) -> None:
    for sql in ("SELECT * FROM read_text('/etc/passwd')", "SELECT * FROM read_csv('/etc/passwd')",
                "SELECT * FROM glob('/etc/*')", f"SELECT * FROM read_text('{warehouse}/../../../etc/passwd')",
                f"SELECT * FROM read_text('{warehouse / '.cache'}/*')"):
        assert "file system operations are disabled" in refused(warehouse, sql) or "Permission" in refused(
            warehouse, sql), sql
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    assert "Permission" in refused(warehouse, f"SELECT * FROM '{secret}'")


def test_nothing_can_be_written_or_changed(warehouse: Path, tmp_path: Path) -> None:
    before = sorted(p.relative_to(warehouse) for p in warehouse.rglob("*"))
    inside = warehouse / "dash" / "cells" / "evil.csv"
    for sql, kind in ((f"COPY (SELECT 1) TO '{inside}'", "COPY"), (f"COPY cells TO '{tmp_path / 'x.csv'}'", "COPY"),
                      ("CREATE TABLE t AS SELECT 1", "CREATE"), ("INSERT INTO cells SELECT * FROM cells", "INSERT"),
                      ("SET enable_external_access = true", "SET"), (f"ATTACH '{tmp_path / 'x.db'}'", "ATTACH"),
                      ("INSTALL httpfs", "LOAD"), ("LOAD httpfs", "LOAD"), (f"EXPORT DATABASE '{tmp_path}'", "EXPORT"),
                      ("DROP VIEW cells", "DROP")):
        message = refused(warehouse, sql)
        assert "read-only" in message and kind in message, (sql, message)
    assert "one query at a time" in refused(warehouse, "SELECT 1; COPY (SELECT 1) TO '/tmp/x.csv'")
    assert not inside.exists() and not (tmp_path / "x.csv").exists() and not (tmp_path / "x.db").exists()
    assert sorted(p.relative_to(warehouse) for p in warehouse.rglob("*")) == before


def test_row_and_time_limits(warehouse: Path) -> None:
    result = run_query(warehouse, "SELECT * FROM range(25)", row_limit=10)
    assert len(result.frame) == 10 and result.truncated
    result = run_query(warehouse, "SELECT * FROM range(10)", row_limit=10)
    assert len(result.frame) == 10 and not result.truncated
    message = refused(warehouse, "SELECT count(*) FROM range(100000000000)", time_limit_s=1.0)
    assert "time limit of 1 s" in message


def test_errors_are_one_line(warehouse: Path) -> None:
    assert "nope" in refused(warehouse, "SELECT nope FROM cells")
    assert "no statement" in refused(warehouse, "  ")
    assert "syntax" in refused(warehouse, "SELEC 1").lower()
