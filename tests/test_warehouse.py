"""Atomic files, repair after a kill, DuckDB views over an empty or partial warehouse, damaged files,
quarantine and the writer lock."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from farm.errors import UserError
from farm.warehouse import LOCK_NAME, SCHEMAS, TABLES, Warehouse, file_problem, schema_problem, write_parquet
from farm.warehouse.layout import WarehouseLayout
from farm.warehouse.repair import WarehouseRepair


def test_write_parquet_leaves_only_the_final_file(tmp_path: Path) -> None:
    table = pa.table({"a": [1, 2]})
    write_parquet(table, tmp_path / "x.parquet")
    write_parquet(pa.table({"a": [3]}), tmp_path / "x.parquet")  # replaces in place
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
        warehouse.write_rows("devices", sweep, "cpu-1", [row])
    assert warehouse.connect().execute("SELECT count(*) FROM devices").fetchone() == (1,)


def test_cell_keyed_tables_share_only_the_cell_id() -> None:
    """So that `JOIN ... USING (cell_id)` never makes a column name ambiguous."""
    seen: dict[str, str] = {}
    for table in ("cells", "builds", "measurements", "samples", "layers"):
        for column in SCHEMAS[table].names:
            if column != "cell_id":
                assert column not in seen, f"{column} is in both {seen.get(column)} and {table}"
                seen[column] = table


# --- damaged files: a cheap check of both ends, a thorough one of the footer and schema ----------

def whole_file(directory: Path, table: str = "measurements", name: str = "c1") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.parquet"
    write_parquet(pa.table({"cell_id": [name], "throughput_qps": [1.0]}), path)
    return path


def test_file_problem_finds_truncated_emptied_and_overwritten_files(tmp_path: Path) -> None:
    path = whole_file(tmp_path)
    data = path.read_bytes()
    assert file_problem(path) is None
    assert file_problem(tmp_path / "gone.parquet") is None  # removed since it was listed: not damaged
    cases = {"truncated": data[: len(data) // 2], "empty": b"", "zeros": bytes(len(data)),
             "head overwritten": b"XXXX" + data[4:], "footer too long": data[:-8] + (10**6).to_bytes(4, "little") + b"PAR1"}
    for name, content in cases.items():
        damaged = tmp_path / f"{name}.parquet"
        damaged.write_bytes(content)
        assert file_problem(damaged), name


def test_schema_problem_accepts_older_files_and_refuses_other_tables(tmp_path: Path) -> None:
    older = tmp_path / "older.parquet"  # an older farm: fewer columns, one under an old name
    pq.write_table(pa.table({"cell_id": ["a"], "status": ["ok"], "input_shapes": ["{}"], "batch": pa.array([1], pa.int64())}),
                   older)
    assert schema_problem(older, "cells") is None
    samples = tmp_path / "samples.parquet"
    pq.write_table(SCHEMAS["samples"].empty_table(), samples)
    assert schema_problem(samples, "samples") is None
    assert "no column of the measurements table" in schema_problem(samples, "measurements")
    assert "no device_id column" in schema_problem(samples, "devices")
    typed = tmp_path / "typed.parquet"
    pq.write_table(pa.table({"cell_id": ["a"], "batch": ["eight"]}), typed)
    assert "column batch is string" in schema_problem(typed, "cells")
    garbage = tmp_path / "garbage.parquet"  # both ends whole, the footer itself garbage
    data = whole_file(tmp_path / "g").read_bytes()
    garbage.write_bytes(data[:-200] + b"\x07" * 192 + data[-8:])
    assert file_problem(garbage) is None and schema_problem(garbage, "measurements").startswith("unreadable footer")


def test_views_leave_out_damaged_files_with_one_warning_each(tmp_path: Path) -> None:
    warnings: list[str] = []
    warehouse = Warehouse(tmp_path, warn=warnings.append)
    for sweep in ("a", "b"):
        for name in ("c1", "c2"):
            whole_file(warehouse.table_dir(sweep, "measurements"), name=f"{sweep}{name}")
    truncated = warehouse.table_dir("a", "measurements") / "ac1.parquet"
    truncated.write_bytes(truncated.read_bytes()[:100])
    # both ends whole, footer garbage: only DuckDB notices, when it binds the view
    garbage = warehouse.table_dir("b", "measurements") / "bc2.parquet"
    data = garbage.read_bytes()
    garbage.write_bytes(data[:-200] + b"\x07" * 192 + data[-8:])
    con = warehouse.connect()
    columns, rows = warehouse.fetch(con, "SELECT cell_id FROM measurements ORDER BY cell_id")
    assert columns == ["cell_id"] and rows == [("ac2",), ("bc1",)]
    assert len(warnings) == 2 and str(truncated) in warnings[0] and str(garbage) in warnings[1]
    assert set(warehouse.skipped) == {truncated, garbage}
    assert warehouse.fetch(con, "SELECT 1") == (["1"], [(1,)])


def test_a_failed_write_leaves_no_temporary_file_and_says_what_to_do(tmp_path: Path) -> None:
    target = tmp_path / "x.parquet"
    target.mkdir()  # something that is not a file stands where the file goes: the rename fails
    (target / "keep").write_text("x")
    with pytest.raises(UserError) as error:
        write_parquet(pa.table({"a": [1]}), target)
    assert str(target) in str(error.value) and "\n" not in str(error.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.parquet"]  # no .x.parquet.<pid>.tmp left


def test_quarantine_moves_a_cell_file_with_its_cells_file(tmp_path: Path) -> None:
    warehouse = Warehouse(tmp_path)
    for table in ("cells", "measurements", "samples"):
        pq.write_table(SCHEMAS[table].empty_table(), whole_file(warehouse.table_dir("s", table), name="c1"))
    moves = warehouse.quarantine("s", warehouse.table_dir("s", "samples") / "c1.parquet")
    damaged = tmp_path / "s" / ".damaged"
    # the cells file first (as write_cell un-marks a cell first): a kill in between leaves no done cell without a file
    assert [to for _, to in moves] == [damaged / "cells" / "c1.parquet", damaged / "samples" / "c1.parquet"]
    assert warehouse.repair("s") == [warehouse.table_dir("s", "measurements") / "c1.parquet"]  # cell not done
    whole_file(warehouse.table_dir("s", "samples"), name="c1")
    again = warehouse.quarantine("s", warehouse.table_dir("s", "samples") / "c1.parquet")
    assert [to.name for _, to in again] == ["c1.1.parquet"]  # the first one is kept


def test_writer_lock_records_its_holder_and_nests(tmp_path: Path) -> None:
    warehouse = Warehouse(tmp_path / "new")
    assert warehouse.lock_holder() is None
    with warehouse.writer_lock():
        record = json.loads((tmp_path / "new" / LOCK_NAME).read_text())
        assert record["pid"] == os.getpid() and record["host"] and record["command"] and record["started_at"]
        with Warehouse(tmp_path / "new").writer_lock():  # the same process may take it again
            pass
        assert warehouse.lock_holder() is None  # not another process
    assert (tmp_path / "new" / LOCK_NAME).read_text() == ""  # released: nobody named


def test_one_rule_says_which_folders_are_sweeps(tmp_path: Path) -> None:
    """A sweep is a folder of the root, not a dot folder, holding a table folder: readers, writers,
    `farm check` and the dashboard's SQL console all go by `sweep_dirs`."""
    warehouse = Warehouse(tmp_path)
    warehouse.write_rows("cells", "real", "c1", [{"cell_id": "c1", "status": "ok"}])
    warehouse.write_rows("cells", "started", "c2", [{"cell_id": "c2", "status": "ok"}])
    (tmp_path / "started" / "cells" / "c2.parquet").unlink()  # a run that wrote its sweeps row only
    warehouse.write_rows("sweeps", "started", "r", [{"run_id": "r", "sweep_id": "started"}])
    for other in (".git/cells", "notes", "examples/gpu/cells"):  # a dot folder, no table folder, a nested warehouse
        (tmp_path / other).mkdir(parents=True)
    pq.write_table(SCHEMAS["cells"].empty_table(), tmp_path / ".git" / "cells" / "x.parquet")
    (tmp_path / ".git" / "cells" / ".x.parquet.1.tmp").write_bytes(b"x")
    assert [p.name for p in warehouse.sweep_dirs()] == ["real", "started"] and warehouse.sweeps() == ["real", "started"]
    assert warehouse.table_globs("cells") == [str(tmp_path / "real" / "cells" / "*.parquet")]
    assert warehouse.connect().execute("SELECT cell_id FROM cells").fetchall() == [("c1",)]
    assert warehouse.leftovers() == []


def test_the_files_a_duckdb_error_names(tmp_path: Path) -> None:
    from farm.warehouse import parquet_files_named

    root = tmp_path / "w[1]"
    message = (f"Invalid Input Error: No magic bytes found at end of file '{root}/s/cells/a.parquet'\n\n"
               f"LINE 1: ... read_parquet(['{root}/s/cells/*.parquet', '{tmp_path}/w[[]1]/s/cells/b.parquet', "
               f"'/elsewhere/c.parquet'])")
    assert parquet_files_named(message, root) == [root / "s" / "cells" / "a.parquet"]


def test_a_relative_root_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert Warehouse("results").root == tmp_path / "results"
    assert Warehouse("").root == tmp_path and Warehouse("a/../b").root == tmp_path / "b"


def test_a_garbled_footer_that_duckdb_does_not_name_is_found_and_skipped(tmp_path: Path) -> None:
    """Both ends whole, the whole footer garbage: DuckDB says only "TProtocolException: Invalid
    data", naming no file; the footers are then parsed and the file left out, with a warning."""
    warnings: list[str] = []
    warehouse = Warehouse(tmp_path, warn=warnings.append)
    for key in ("c0", "c1"):
        warehouse.write_rows("cells", "s", key, [{"cell_id": key, "status": "ok"}])
    victim = tmp_path / "s" / "cells" / "c0.parquet"
    data = victim.read_bytes()
    footer = int.from_bytes(data[-8:-4], "little")
    # zeros: a Thrift struct that stops at once, its required fields missing, whatever the footer's
    # length (other bytes may read as a length that runs past the file, an error that names it)
    victim.write_bytes(data[:-8 - footer] + b"\x00" * footer + data[-8:])
    assert warehouse.connect().execute("SELECT cell_id FROM cells").fetchall() == [("c1",)]
    assert len(warnings) == 1 and str(victim) in warnings[0] and "unreadable footer" in warnings[0]


# --- rows are checked against the table's schema, as the config checks keys -----------------------

def test_an_unknown_or_missing_column_is_an_error_naming_it_and_nothing_is_written(tmp_path: Path) -> None:
    from farm.warehouse import RowError

    warehouse = Warehouse(tmp_path)
    cells = [{"cell_id": "c1", "sweep_id": "s", "status": "ok"}]
    with pytest.raises(RowError, match="throughput_qsp"):  # a misspelt metric is not written as NULL
        warehouse.write_cell("s", "c1", {"cells": cells, "measurements": [{"cell_id": "c1", "throughput_qsp": 1.0}]})
    with pytest.raises(RowError, match="status"):
        warehouse.write_cell("s", "c1", {"cells": [{"cell_id": "c1", "sweep_id": "s"}]})
    with pytest.raises(RowError, match="another cell"):
        warehouse.write_cell("s", "c1", {"cells": cells, "builds": [{"cell_id": "c2", "build_s": 1.0}]})
    with pytest.raises(RowError, match="no warehouse table"):
        warehouse.write_rows("metrics", "s", "c1", [{"cell_id": "c1"}])
    assert not (tmp_path / "s").exists()
    # optional columns may be absent: they are written as NULL
    warehouse.write_cell("s", "c1", {"cells": cells, "measurements": [{"cell_id": "c1", "throughput_qps": 2.0}]})
    assert warehouse.connect().execute("SELECT throughput_qps, latency_p99_ms FROM measurements").fetchall() == [(2.0, None)]


# --- compaction --------------------------------------------------------------------------------

COMPACTED = ("cells", "builds", "measurements", "samples", "layers", "accuracy")


def write_cells(warehouse: Warehouse, sweep: str, ids: list[str], qps: float = 100.0) -> None:
    """Cells with a row in every cell table (every seventh failed: only its cells row)."""
    for cell_id in ids:
        failed = int(cell_id, 16) % 7 == 3
        tables = {"cells": [{"cell_id": cell_id, "sweep_id": sweep, "status": "failed" if failed else "ok",
                             "reason": "boom" if failed else None}]}
        if not failed:
            tables.update({
                "builds": [{"cell_id": cell_id, "build_s": 1.0}],
                "measurements": [{"cell_id": cell_id, "throughput_qps": qps + int(cell_id, 16)}],
                "samples": [{"cell_id": cell_id, "repeat": 0, "iteration": i, "latency_ms": 1.0 + i} for i in range(3)],
                "layers": [{"cell_id": cell_id, "layer_index": i, "name": f"l{i}"} for i in range(2)],
                "accuracy": [{"cell_id": cell_id, "output_name": "y", "verdict": "pass"}]})
        warehouse.write_cell(sweep, cell_id, tables)


def every_row(results: Path) -> dict[str, list]:
    warehouse = Warehouse(results, warn=lambda _: None)
    con = warehouse.connect()
    return {t: sorted(map(repr, warehouse.fetch(con, f"SELECT * EXCLUDE (cell_id), cell_id FROM {t}")[1]))
            for t in COMPACTED}


@pytest.fixture(params=["whole", "chunks of 3"])
def chunked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compaction and status reads as they run (hundreds of cells at a time), and a few at a time:
    blocks then span several chunks, and a rewritten block's rows interleave with redone cells'."""
    if request.param != "whole":
        monkeypatch.setattr("farm.warehouse.compact.CHUNK_CELLS", 3)
        monkeypatch.setattr("farm.warehouse.repair.READ_FILES", 3)


def test_compaction_keeps_every_row_once_and_resume_reads_it(tmp_path: Path, chunked: None) -> None:
    results = tmp_path / "results"
    warehouse = Warehouse(results)
    ids = [f"{i:016x}" for i in range(25)]
    write_cells(warehouse, "s", ids)
    before, statuses = every_row(results), warehouse.cell_statuses("s")
    done = warehouse.compact("s", block_cells=10)
    assert (done.cells, done.blocks) == (25, 3)
    assert every_row(results) == before  # every row, once
    assert not [p for t in COMPACTED for p in warehouse.loose_files("s", t)]  # per-cell files gone
    assert sorted(p.name for p in (results / "s" / "cells").iterdir()) == [
        "part-000001-0000.parquet", "part-000001-0001.parquet", "part-000001-0002.parquet"]
    for table in COMPACTED:  # sorted by cell: a cell's rows are found by row-group statistics
        for part in (results / "s" / table).glob("part-*.parquet"):
            column = pq.read_table(part, columns=["cell_id"]).column(0).to_pylist()
            assert column == sorted(column), part
    prepared = warehouse.prepare_sweep("s")  # what a rerun does before its first cell
    assert prepared.statuses == statuses and not prepared.moved and not prepared.removed
    assert warehouse.failure_reasons("s") == {c: "boom" for c, s in statuses.items() if s == "failed"}
    assert warehouse.cell_rows("s", "samples", ids[5], ["iteration"]).column(0).to_pylist() == [0, 1, 2]
    assert warehouse.cell_rows("s", "samples", ids[3]) is None  # a failed cell has none
    assert warehouse.inspect().findings == []
    assert warehouse.compact("s", block_cells=10).cells == 0  # nothing per-cell: nothing written


def test_a_cell_redone_after_compaction_supersedes_its_compacted_rows(tmp_path: Path, chunked: None) -> None:
    results = tmp_path / "results"
    warehouse = Warehouse(results)
    ids = [f"{i:016x}" for i in range(25)]
    write_cells(warehouse, "s", ids)
    warehouse.compact("s", block_cells=10)
    redo = [ids[3], ids[5]]  # a failed cell that now passes, an ok cell that now fails
    warehouse.write_cell("s", ids[3], {"cells": [{"cell_id": ids[3], "status": "ok"}],
                                       "measurements": [{"cell_id": ids[3], "throughput_qps": 7.0}]})
    warehouse.write_cell("s", ids[5], {"cells": [{"cell_id": ids[5], "status": "failed", "reason": "later"}]})

    def check() -> None:
        con = warehouse.connect()
        for table in COMPACTED:
            rows = warehouse.fetch(con, f"SELECT cell_id, count(*) FROM {table} GROUP BY cell_id")[1]
            assert all(n == 1 for _, n in rows if table not in ("samples", "layers")), table
        got = dict(warehouse.fetch(con, "SELECT cell_id, status FROM cells WHERE cell_id IN (?, ?)", redo)[1])
        assert got == {ids[3]: "ok", ids[5]: "failed"}
        assert warehouse.fetch(con, "SELECT throughput_qps FROM measurements WHERE cell_id = ?", [ids[3]])[1] == [(7.0,)]
        assert warehouse.fetch(con, "SELECT count(*) FROM samples WHERE cell_id = ?", [ids[5]])[1] == [(0,)]
        assert warehouse.cell_statuses("s")[ids[5]] == "failed" and warehouse.failure_reasons("s")[ids[5]] == "later"
        assert warehouse.cell_rows("s", "samples", ids[5]) is None
        assert warehouse.fetch(con, "SELECT count(*) FROM cells")[1] == [(25,)]

    check()  # the per-cell files win
    done = warehouse.compact("s", block_cells=10)
    assert done.cells == 2 and done.rewritten > 0
    check()  # and after they are compacted in turn
    assert warehouse.inspect().findings == []


def test_the_sql_console_sees_compacted_rows_once(tmp_path: Path) -> None:
    """The dashboard's SQL console builds its own views (pyarrow datasets, no DuckDB file access):
    after compaction and a redo that supersedes compacted rows, it sees every row exactly once,
    as the warehouse's own views do (it read every file of a table folder, so a redone cell
    counted twice)."""
    from farm.sql_console.console import Sandbox

    results = tmp_path / "results"
    warehouse = Warehouse(results)
    ids = [f"{i:016x}" for i in range(25)]
    write_cells(warehouse, "s", ids)
    warehouse.compact("s", block_cells=10)
    warehouse.write_cell("s", ids[5], {"cells": [{"cell_id": ids[5], "status": "failed", "reason": "later"}]})
    con = warehouse.connect()
    sandbox = Sandbox(results)
    try:
        for table in COMPACTED:
            sql = f"SELECT cell_id, count(*) FROM {table} GROUP BY cell_id ORDER BY cell_id"
            assert sandbox.execute(sql).fetchall() == warehouse.fetch(con, sql)[1], table
        assert sandbox.execute("SELECT status FROM cells WHERE cell_id = ?", [ids[5]]).fetchall() == [("failed",)]
    finally:
        sandbox.close()


def test_a_crash_mid_compaction_leaves_the_old_files_counting(tmp_path: Path, monkeypatch) -> None:
    results = tmp_path / "results"
    warehouse = Warehouse(results)
    write_cells(warehouse, "s", [f"{i:016x}" for i in range(12)])
    before = every_row(results)

    def killed(*_args) -> None:
        raise KeyboardInterrupt  # killed before compaction.json was replaced
    monkeypatch.setattr(WarehouseRepair, "write_compaction", killed)  # the repairs part commits
    with pytest.raises(KeyboardInterrupt):
        warehouse.compact("s", block_cells=5)
    monkeypatch.undo()
    assert list((results / "s" / "samples").glob("part-*"))  # new blocks written, not counted
    assert every_row(results) == before
    assert {f.kind for f in warehouse.inspect().findings} == {"orphan"}
    saved = {p: p.read_bytes() for t in COMPACTED for p in warehouse.loose_files("s", t)}
    warehouse.compact("s", block_cells=5)  # the next writer removes them and compacts
    assert every_row(results) == before
    for path, data in saved.items():  # killed after the commit, before the per-cell files went
        path.write_bytes(data)
    assert every_row(results) == before
    assert warehouse.compact("s", block_cells=5).cells == 12
    assert every_row(results) == before and warehouse.inspect().findings == []


def test_a_damaged_compacted_file_costs_only_its_rows(tmp_path: Path) -> None:
    results = tmp_path / "results"
    warehouse = Warehouse(results)
    ids = [f"{i:016x}" for i in range(20)]
    write_cells(warehouse, "s", ids)
    warehouse.compact("s", block_cells=10)
    damaged = results / "s" / "samples" / "part-000001-0000.parquet"
    damaged.write_bytes(damaged.read_bytes()[:-20])
    warnings: list[str] = []
    reader = Warehouse(results, warn=warnings.append)
    con = reader.connect()
    samples = reader.fetch(con, "SELECT count(DISTINCT cell_id) FROM samples")[1][0][0]
    assert samples == sum(1 for c in ids[10:] if int(c, 16) % 7 != 3)  # the other block's
    assert reader.fetch(con, "SELECT count(*) FROM cells")[1] == [(20,)]
    assert len(warnings) == 1 and "damaged compacted file" in warnings[0] and str(damaged) in warnings[0]
    findings = warehouse.inspect().findings
    assert [(f.kind, f.path) for f in findings] == [("damaged", damaged)]
    with warehouse.writer_lock():
        warehouse.fix(findings)
    assert set(warehouse.cell_statuses("s")) == set(ids[10:])  # its block's cells: measured again
    assert (results / "s" / ".damaged" / "samples" / damaged.name).is_file()
    assert warehouse.inspect().findings == []
    assert Warehouse(results, warn=warnings.append).connect().execute("SELECT count(*) FROM cells").fetchone() == (10,)


def _rows_of(warehouse: Warehouse, con) -> dict[str, list]:
    return {t: sorted(map(repr, warehouse.fetch(con, f"SELECT * EXCLUDE (cell_id), cell_id FROM {t}")[1]))
            for t in COMPACTED}


def test_views_made_before_a_compaction_count_every_row_once_at_each_step_of_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader's views, made over per-cell files, queried at each moment of a compaction (blocks
    written, the manifest committed, the per-cell files removed): every row once each time. Its
    glob once matched the new blocks too (every row twice between the commit and the removal)."""
    results = tmp_path / "results"
    writer = Warehouse(results)
    ids = [f"{i:016x}" for i in range(30)]
    write_cells(writer, "s", ids)
    writer.write_cell("s", "pcell", {"cells": [{"cell_id": "pcell", "sweep_id": "s", "status": "failed", "reason": "boom"}]})
    ids.append("pcell")  # a per-cell name that starts with "p", as compacted files do: still read
    reader = Warehouse(results, warn=lambda _: None)
    con = reader.connect()
    expected = _rows_of(reader, con)
    seen = []
    commit = WarehouseRepair.write_compaction

    def committed(self, sweep, compaction):  # blocks written, not yet listed: the reader's glob must skip them
        seen.append(_rows_of(reader, con))
        commit(self, sweep, compaction)
        seen.append(_rows_of(reader, con))  # committed, per-cell files still there

    monkeypatch.setattr(WarehouseRepair, "write_compaction", committed)
    assert writer.compact("s", block_cells=7).cells == len(ids)
    seen.append(_rows_of(reader, con))  # per-cell files removed
    assert len(seen) == 3 and all(rows == expected for rows in seen)
    assert len(expected["cells"]) == len(ids)


def test_a_file_removed_and_written_again_under_a_reader_is_not_taken_for_damaged(tmp_path: Path) -> None:
    """A view names a cell's file; a compaction removes it and a rerun writes one of the same name
    before the reader looks: the reader reads again, and never skips the new file as damaged (it
    did, and that cell's rows were gone from every later read)."""
    results = tmp_path / "results"
    writer = Warehouse(results)
    ids = [f"{i:016x}" for i in range(3)]
    write_cells(writer, "s", ids)
    writer.compact("s", block_cells=10)
    write_cells(writer, "s", ids[:1])  # redone after compaction: a file of its own again
    reader = Warehouse(results, warn=lambda _: None)
    con = reader.connect()
    expected = _rows_of(reader, con)
    own = results / "s" / "measurements" / f"{ids[0]}.parquet"
    data = own.read_bytes()
    own.unlink()
    with pytest.raises(Exception) as gone:  # what DuckDB says of the view's file now
        con.execute("SELECT count(*) FROM measurements").fetchall()
    own.write_bytes(data)  # written anew before the reader looks at what the error named
    assert reader._views._skip_file_of(gone.value) and own not in reader.skipped
    assert _rows_of(reader, reader.connect()) == expected


def test_farm_compare_reader_lists_again_when_a_compaction_removed_its_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """farm compare's reader of many cells' samples lists a sweep's per-cell files, and a
    compaction removes them before DuckDB reads them: it lists again and reads the compacted
    rows, every one once, and takes no file for damaged (it did: a false warning, and those
    cells' samples missing)."""

    results = tmp_path / "results"
    writer = Warehouse(results)
    ids = [f"{i:016x}" for i in range(12)]
    write_cells(writer, "s", ids)
    warnings: list[str] = []
    reader = Warehouse(results, warn=warnings.append)
    expected = reader.rows_of_cells("s", "samples", ids, ["iteration", "latency_ms"])
    ok = sum(int(i, 16) % 7 != 3 for i in ids)  # failed cells have no samples
    assert expected.num_rows == 3 * ok
    listings = []
    listed = WarehouseLayout.sources

    def compacted_after_listing(self, sweep, table, compaction=None):
        found = listed(self, sweep, table, compaction)
        if self is not reader._layout:  # the compaction's own listings
            return found
        listings.append((len(found.loose), len(found.parts)))
        if len(listings) == 1:
            writer.compact("s", block_cells=5)  # the listed per-cell files are gone now
        return found

    monkeypatch.setattr(WarehouseLayout, "sources", compacted_after_listing)
    got = reader.rows_of_cells("s", "samples", ids, ["iteration", "latency_ms"])
    assert listings == [(ok, 0), (0, 3)]  # per-cell files first, then the compacted blocks
    assert got.equals(expected) and not reader.skipped and warnings == []
