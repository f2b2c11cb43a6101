"""The SQL console reads the warehouse's tables and nothing else, writes nowhere, shows no server
path or setting, and stops at its limits."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import duckdb
import pytest

from farm.dashboard.sql import QueryRefused, Sandbox, run_query
from farm.warehouse import TABLES


def refused(results: Path, sql: str, **limits) -> str:
    with pytest.raises(QueryRefused) as info:
        run_query(results, sql, **limits)
    message = str(info.value)
    assert "\n" not in message
    return message


def listing(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*"))


@pytest.fixture
def private_tmp(monkeypatch, tmp_path: Path) -> Path:
    """Temporary folders (the console's spill folder among them) made in a folder of the test's own,
    and a working directory of its own: what DuckDB leaves in either is seen."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.chdir(tmp_path)
    return folder


def test_reads_every_warehouse_table(warehouse: Path) -> None:
    result = run_query(warehouse, "SELECT status, count(*) AS n FROM cells WHERE sweep_id = 'dash' "
                                  "GROUP BY 1 ORDER BY 1")
    assert result.frame.to_dict("records") == [{"status": "failed", "n": 6}, {"status": "ok", "n": 6},
                                               {"status": "unsupported", "n": 6}]
    for table in ("sweeps", "builds", "measurements", "samples", "layers", "accuracy", "devices"):
        assert len(run_query(warehouse, f"SELECT * FROM {table}").frame) > 0, table
    pivot = run_query(warehouse, "PIVOT (SELECT precision, batch, throughput_qps FROM cells JOIN measurements "
                                 "USING (cell_id) WHERE sweep_id = 'dash') ON precision IN ('fp16', 'fp32') "
                                 "USING first(throughput_qps)")
    assert sorted(pivot.frame.columns) == ["batch", "fp16", "fp32"] and len(pivot.frame) == 3
    unpivot = run_query(warehouse, "UNPIVOT (SELECT 1 AS a, 2 AS b) ON a, b INTO NAME k VALUE v")
    assert unpivot.frame.to_dict("records") == [{"k": "a", "v": 1}, {"k": "b", "v": 2}]
    assert sorted(run_query(warehouse, "SHOW TABLES").frame.name) == sorted(TABLES)
    assert "sweep_id" in set(run_query(warehouse, "DESCRIBE cells").frame.column_name)
    assert len(run_query(warehouse, "WITH ok AS (FROM cells WHERE status = 'ok') SELECT * FROM ok").frame) >= 6
    plan = run_query(warehouse, "EXPLAIN SELECT count(*) FROM layers").frame
    assert len(plan) >= 1 and str(warehouse) not in plan.to_string()


def test_files_are_out_of_reach_even_the_warehouses(warehouse: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    cell_files = f"{warehouse}/dash/cells/*.parquet"
    for sql in ("SELECT * FROM read_text('/etc/passwd')", "SELECT * FROM read_csv('/etc/passwd')",
                f"SELECT * FROM read_text('{warehouse}/../../../etc/passwd')", f"SELECT * FROM '{secret}'",
                f"SELECT * FROM read_text('{warehouse / '.cache'}/*')", f"SELECT * FROM read_parquet('{cell_files}')"):
        message = refused(warehouse, sql)
        assert "file system operations are disabled" in message or "no table" in message, (sql, message)
        assert str(warehouse) not in message, message  # the warehouse's path reads as <results>
    assert "<results>/dash/cells/*.parquet" in refused(warehouse, f"SELECT * FROM read_parquet('{cell_files}')")


def test_nothing_can_be_written_or_changed(warehouse: Path, tmp_path: Path) -> None:
    before = listing(warehouse)
    inside = warehouse / "dash" / "cells" / "evil.csv"
    for sql, kind in ((f"COPY (SELECT 1) TO '{inside}'", "COPY"), (f"COPY cells TO '{tmp_path / 'x.csv'}'", "COPY"),
                      ("CREATE TABLE t AS SELECT 1", "CREATE"), ("INSERT INTO cells SELECT * FROM cells", "INSERT"),
                      ("SET enable_external_access = true", "SET"), (f"ATTACH '{tmp_path / 'x.db'}'", "ATTACH"),
                      ("INSTALL httpfs", "LOAD"), ("LOAD httpfs", "LOAD"), (f"EXPORT DATABASE '{tmp_path}'", "EXPORT"),
                      ("DROP VIEW cells", "DROP"), ("SET VARIABLE v = 1", "SET"), ("CALL pragma_version()", "CALL"),
                      ("PRAGMA database_list", "PRAGMA"), ("CHECKPOINT", "CALL")):
        message = refused(warehouse, sql)
        assert "read-only" in message and kind in message, (sql, message)
    assert "one query at a time" in refused(warehouse, "SELECT 1; COPY (SELECT 1) TO '/tmp/x.csv'")
    # A PIVOT without an IN list is two statements (CREATE TYPE, then the query).
    assert "IN list" in refused(warehouse, "PIVOT cells ON precision USING count(*)")
    assert not inside.exists() and not (tmp_path / "x.csv").exists() and not (tmp_path / "x.db").exists()
    assert listing(warehouse) == before


def test_explain_analyze_runs_nothing(warehouse: Path) -> None:
    """EXPLAIN ANALYZE runs its statement: a COPY under it once wrote a forged cell file into the
    warehouse. Only a plain EXPLAIN of a query runs, and the console builds that EXPLAIN itself."""
    before = listing(warehouse)
    forged = warehouse / "dash" / "cells" / "forged.parquet"
    copy = f"COPY (SELECT * FROM cells LIMIT 1) TO '{forged}'"
    try:
        for sql in (f"EXPLAIN ANALYZE {copy}", f"explain analyse {copy}", f"EXPLAIN /* hint */ ANALYZE {copy}",
                    f"EXPLAIN (ANALYZE) {copy}", f"EXPLAIN {copy}", "EXPLAIN ANALYZE SELECT 1",
                    "EXPLAIN (FORMAT json) SELECT 1"):
            assert "EXPLAIN ANALYZE" in refused(warehouse, sql), sql
        assert not forged.exists() and listing(warehouse) == before
    finally:
        forged.unlink(missing_ok=True)  # the session's warehouse stays as it was, whatever happened


def test_duckdb_cannot_write_even_if_a_write_statement_ran(warehouse: Path, private_tmp: Path) -> None:
    """The connection itself, past the statement check: no folder or file of the warehouse or the
    working directory is writable; only the spill folder is."""
    before = listing(warehouse)
    cell_file = next((warehouse / "dash" / "cells").glob("*.parquet"))
    with Sandbox(warehouse) as sandbox:
        spill = sandbox.temp_dir
        for sql in (f"COPY (SELECT 42 AS forged) TO '{cell_file}' (USE_TMP_FILE false)",
                    f"COPY (SELECT 42 AS forged) TO '{warehouse}/dash/cells/new.parquet'",
                    "COPY (SELECT 42) TO ':memory:' (USE_TMP_FILE false)",  # the working directory
                    f"COPY (SELECT 42) TO '{spill}/../escape.csv'", f"ATTACH '{private_tmp / 'x.db'}'",
                    "SET enable_external_access = true", "SET allowed_directories = ['/']", "INSTALL httpfs"):
            with pytest.raises(duckdb.Error):
                sandbox.execute(sql)
        assert sandbox.execute("SELECT count(*) FROM cells").fetchone()[0] > 0
        assert listing(warehouse) == before
        assert spill.parent == private_tmp and not spill.is_relative_to(warehouse.resolve())
        # Defence in depth: no setting names a folder but the spill folder (SHOW, current_setting).
        for name, value in sandbox.execute("SELECT name, value FROM duckdb_settings()").fetchall():
            for secret in (str(warehouse), str(warehouse.resolve()), os.getcwd(), str(Path.home())):
                assert secret not in str(value).replace(str(spill), ""), (name, value)
    assert listing(warehouse) == before
    assert sorted(p.name for p in Path.cwd().iterdir()) == ["tmp"] and not any(private_tmp.iterdir())


def test_settings_and_server_paths_stay_private(warehouse: Path) -> None:
    for sql, name in (("SELECT current_setting('allowed_directories')", "current_setting"),
                      ("SELECT 'temp_directory'.current_setting()", "current_setting"),
                      ("SELECT system.main.\"CURRENT_SETTING\"('temp_directory')", "current_setting"),
                      ("SELECT * FROM duckdb_settings()", "duckdb_settings"),
                      ("SELECT * FROM duckdb_databases()", "duckdb_databases"),
                      ("SELECT * FROM duckdb_extensions()", "duckdb_extensions"),
                      ("SELECT sql FROM duckdb_views()", "duckdb_views"),
                      ("SELECT * FROM duckdb_temporary_files()", "duckdb_temporary_files"),
                      ("SELECT * FROM glob('/etc/*')", "glob"), ("SELECT * FROM query('SELECT 1')", "query"),
                      ("SELECT * FROM enable_logging()", "enable_logging"), ("SELECT write_log('x')", "write_log"),
                      ("SELECT * FROM cells WHERE cell_id IN (SELECT name FROM duckdb_settings())", "duckdb_settings"),
                      ("SELECT * FROM pragma_database_list", "pragma_database_list"),
                      ("SELECT * FROM information_schema.tables", "information_schema.tables"),
                      ("FROM pg_settings", "pg_settings"), ("SELECT pg_get_viewdef(1)", "pg_get_viewdef"),
                      ("FROM (WITH pg_settings AS (SELECT 1) SELECT 1), pg_settings", "pg_settings"),
                      ("SHOW temp_directory", "temp_directory"), ("SHOW allowed_directories", "allowed_directories")):
        assert name in refused(warehouse, sql), sql
    # What is allowed says nothing of where things are.
    for sql in ("SHOW ALL TABLES", "SUMMARIZE devices", "EXPLAIN SELECT * FROM cells"):
        assert str(warehouse) not in run_query(warehouse, sql).frame.to_string(), sql


def test_row_byte_and_time_limits(warehouse: Path) -> None:
    result = run_query(warehouse, "SELECT * FROM range(25)", row_limit=10)
    assert len(result.frame) == 10 and result.truncated and not result.byte_limited
    result = run_query(warehouse, "SELECT * FROM range(10)", row_limit=10)
    assert len(result.frame) == 10 and not result.truncated
    # Rows of 1,000 bytes against 100,000 bytes: fetching stops at the bytes, well before the rows.
    result = run_query(warehouse, "SELECT repeat('x', 1000) AS s FROM range(5000)", byte_limit=100_000)
    assert 50 <= len(result.frame) < 100 and result.truncated and result.byte_limited
    assert result.frame.s.str.len().sum() <= 100_000
    assert len(run_query(warehouse, "SELECT repeat('x', 1000) AS s FROM range(50)", byte_limit=100_000).frame) == 50
    message = refused(warehouse, "SELECT count(*) FROM range(100000000000)", time_limit_s=1.0)
    assert "time limit of 1 s" in message


def test_spill_stays_in_a_private_capped_folder(warehouse: Path, private_tmp: Path) -> None:
    """A sort bigger than memory spills into the console's own folder, capped, and removed after;
    nothing lands in the working directory (DuckDB's default, `.tmp`)."""
    sort = "SELECT * FROM range(4000000) t(x) ORDER BY hash(x)"
    small = {"memory_limit": "30MB", "threads": 1}  # 30 MB is too little for a sort on several threads
    message = refused(warehouse, sort, spill_limit="1MB", **small)
    assert "30MB of memory and 1MB of spill space" in message
    assert len(run_query(warehouse, sort, spill_limit="1GB", row_limit=5, **small).frame) == 5
    assert sorted(p.name for p in Path.cwd().iterdir()) == ["tmp"] and not any(private_tmp.iterdir())


def test_a_temporary_folder_inside_the_warehouse_is_refused(monkeypatch, tmp_path: Path) -> None:
    results = tmp_path / "results"
    (results / "tmp").mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(results / "tmp"))
    assert "set TMPDIR" in refused(results, "SELECT 1")
    assert not any((results / "tmp").iterdir())


def test_errors_are_one_line(warehouse: Path) -> None:
    assert "nope" in refused(warehouse, "SELECT nope FROM cells")
    assert "no statement" in refused(warehouse, "  ")
    assert "syntax" in refused(warehouse, "SELEC 1").lower()
    assert "no table nope" in refused(warehouse, "SELECT * FROM nope")
