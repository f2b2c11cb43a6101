"""The SQL console reads the warehouse's tables and nothing else, writes nowhere, shows no server
path or setting, and stops at its limits; its queries run in a child process with a memory cap,
which ends with its console or its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import pytest

from farm.sql_console import console as console_module
from farm.sql_console.console import Console, QueryRefused, Sandbox, run_query
from farm.warehouse import TABLES

CHILD = "farm.sql_console.process import serve"  # in the query process's command line
HUGE = "SELECT repeat('x', 10000000) AS s FROM range(3000)"  # 10 MB rows: GBs in one Arrow batch
HUGER = "SELECT range(10000000) AS l FROM range(3000)"  # 80 MB rows: past 8 GB in-process before
LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc: Linux")


def query_processes(parent: int | None = None) -> list[int]:
    """Pids of the console's query processes (children of `parent`, this process by default), by pgrep."""
    found = subprocess.run(["pgrep", "-P", str(parent or os.getpid()), "-f", CHILD], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


def address_space_peak(pid: int) -> int:
    """VmPeak of `pid`, in bytes: what RLIMIT_AS compares with."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmPeak:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmPeak for {pid}")


def querying(pid: int) -> bool:
    """True while `pid`, a query process, runs a query: its working directory is the query's spill folder."""
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd")).name.startswith("farm-sql-")
    except OSError:
        return False


def gone(pid: int) -> bool:
    """True once `pid` has ended (a zombie counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in "ZX"


def wait_until(condition, what: str, limit_s: float = 60.0) -> None:
    """Poll `condition` until it holds; the limit only keeps a broken run from hanging."""
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.fixture(scope="module", autouse=True)
def no_query_process_left():
    """Every query process this module started has ended when it is done."""
    yield
    console_module._close_consoles()
    assert query_processes() == []


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


def test_queries_run_in_one_long_lived_child_process(warehouse: Path) -> None:
    with Console() as console:
        assert console.pid is None  # started at the first query
        assert len(console.run_query(warehouse, "SELECT * FROM cells").frame) > 0
        child = console.pid
        assert child in query_processes()
        for sql in ("SELECT 1", "SELECT * FROM layers", "EXPLAIN SELECT 1"):
            console.run_query(warehouse, sql)
        with pytest.raises(QueryRefused):
            console.run_query(warehouse, "SELECT nope")
        assert console.pid == child  # one process for every query, refused ones included
    assert gone(child) and console.pid is None


@LINUX
def test_a_query_past_the_memory_limit_fails_in_one_line_and_the_next_runs(warehouse: Path) -> None:
    """Rows of 10 MB strings or 80 MB lists build GBs in one Arrow batch, before the byte limit
    sees any: the query process's address space stops them; the console goes on with a fresh
    process."""
    with Console() as probe:  # what an idle query process takes here, and 0.4 GB (1.2 GB on the dev VM)
        probe.run_query(warehouse, "SELECT * FROM layers")
        wall = -(-(address_space_peak(probe.pid) + 4 * 10**8) // 10**8) * 10**8
    with Console(memory_limit=wall) as console:
        assert len(console.run_query(warehouse, "SELECT * FROM layers").frame) > 0
        for sql in (HUGE, HUGER):
            first = console.pid
            with pytest.raises(QueryRefused) as info:
                console.run_query(warehouse, sql)
            message = str(info.value)
            assert message.startswith(f"the query needed more memory than the console allows ({wall / 1e9:g} GB): "), \
                message
            assert "\n" not in message and "narrow it" in message
            assert gone(first)  # a process that hit its limit is not reused
            result = console.run_query(warehouse, "SELECT status, count(*) AS n FROM cells GROUP BY 1")
            assert result.frame.n.sum() > 0 and console.pid not in (None, first)
        # DuckDB's own memory limit, within the process's, still says so.
        with pytest.raises(QueryRefused) as info:
            console.run_query(warehouse, "SELECT * FROM range(4000000) t(x) ORDER BY hash(x)", memory_limit="30MB",
                              spill_limit="1MB", threads=1)
        assert "30MB of memory and 1MB of spill space" in str(info.value)


@LINUX
def test_a_query_process_killed_mid_query_is_one_line_and_replaced(warehouse: Path, private_tmp: Path) -> None:
    """As the kernel's OOM killer would: SIGKILL while the query runs (its working directory is the
    query's spill folder then)."""
    with Console() as console:
        console.run_query(warehouse, "SELECT 1")
        child = console.pid

        def kill_when_running() -> None:
            wait_until(lambda: querying(child), "the query never started")
            os.kill(child, signal.SIGKILL)

        killer = threading.Thread(target=kill_when_running)
        killer.start()
        with pytest.raises(QueryRefused) as info:
            console.run_query(warehouse, "SELECT count(*) FROM range(100000000000)", time_limit_s=120)
        killer.join()
        limit = f"{console_module.PROCESS_MEMORY_LIMIT / 1e9:g} GB"
        assert str(info.value).startswith(f"the query needed more memory than the console allows ({limit}): "
                                          "its process ended (SIGKILL)")
        assert gone(child) and not any(private_tmp.iterdir())  # its spill folder removed for it
        assert console.run_query(warehouse, "SELECT 42 AS x").frame.x.tolist() == [42]
        assert console.pid != child


@LINUX
def test_a_query_process_that_stops_answering_is_killed_after_the_time_limit(warehouse: Path) -> None:
    with Console(grace_s=1) as console:
        console.run_query(warehouse, "SELECT 1")
        child = console.pid
        os.kill(child, signal.SIGSTOP)  # deaf to DuckDB's interrupt and to the pipe
        try:
            with pytest.raises(QueryRefused) as info:
                console.run_query(warehouse, "SELECT 1", time_limit_s=1)
        finally:
            if not gone(child):
                os.kill(child, signal.SIGCONT)
        assert "time limit of 1 s" in str(info.value)
        assert gone(child)
        assert console.run_query(warehouse, "SELECT 42 AS x").frame.x.tolist() == [42]


def test_an_idle_query_process_ends_and_the_next_query_starts_one(warehouse: Path) -> None:
    with Console(idle_exit_s=0.5) as console:
        console.run_query(warehouse, "SELECT 1")
        child = console.pid
        wait_until(lambda: console.pid is None, "the idle query process did not end")
        assert console.run_query(warehouse, "SELECT 42 AS x").frame.x.tolist() == [42]
        assert console.pid != child


@LINUX
def test_the_query_process_ends_with_its_console_or_its_parent(warehouse: Path, tmp_path: Path) -> None:
    console = Console()
    console.run_query(warehouse, "SELECT 1")
    child = console.pid
    del console  # collected: the process ends with it
    wait_until(lambda: gone(child), "a collected console left its query process")
    # A parent killed outright (SIGKILL: no atexit, no collection) mid-query; the query's spill
    # folder goes with the query process.
    temp = tmp_path / "tmp"
    temp.mkdir()
    script = tmp_path / "parent.py"
    script.write_text("import sys\nfrom farm.sql_console.console import Console\nconsole = Console()\n"
                      "console.run_query(sys.argv[1], 'SELECT 1')\nprint(console.pid, flush=True)\n"
                      "console.run_query(sys.argv[1], 'SELECT count(*) FROM range(100000000000)', time_limit_s=600)\n")
    parent = subprocess.Popen([sys.executable, str(script), str(warehouse)], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, TMPDIR=str(temp)))
    try:
        child = int(parent.stdout.readline())
        assert query_processes(parent.pid) == [child]
        wait_until(lambda: querying(child), "the query never started")
        assert any(temp.iterdir())
        parent.kill()
        parent.wait()
        wait_until(lambda: gone(child), "the query process outlived its parent")
        assert not any(temp.iterdir())
    finally:
        parent.kill()
        parent.stdout.close()


def test_nested_values_count_against_the_byte_limit_as_the_page_would_hold_them(warehouse: Path) -> None:
    """300,000 structs of one bool a row are 40 KB of Arrow and about 0.3 GB once the page holds
    them as Python objects (two million: 1.9 GB): the byte limit counts them so (a Python object
    each), and the result is cut before the caller's memory takes it."""
    from farm.sql_console.process import PYTHON_OBJECT_BYTES

    result = run_query(warehouse, "SELECT list_transform(range(300000), lambda x: {'a': true}) AS l "
                                  "FROM range(5)")
    assert result.truncated and result.byte_limited and len(result.frame) == 0
    small = run_query(warehouse, "SELECT list_transform(range(1000), lambda x: {'a': true}) AS l FROM range(5)")
    assert len(small.frame) == 5 and not small.truncated  # 5 x 2,000 objects: well inside the limit
    assert 5 * 2000 * PYTHON_OBJECT_BYTES < console_module.DEFAULT_BYTE_LIMIT
