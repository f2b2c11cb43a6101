"""One writer per warehouse: a second sweep is refused while one runs (naming it), a killed
writer's lock does not outlive it, and two sweeps lose or duplicate nothing."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from farm.errors import UserError
from farm.warehouse import Warehouse, WarehouseBusy
from tests.conftest import tiny_cnn, tiny_sweep_text, write_sweep

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
HOLD = ("import sys, time\nfrom farm.warehouse import Warehouse\n"
        "with Warehouse(sys.argv[1]).writer_lock():\n    print('locked', flush=True)\n    time.sleep(120)\n")


def hold_lock(results: Path) -> subprocess.Popen:
    """Another process holding the warehouse's writer lock, as a running sweep does."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(results)], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_the_lock_names_its_holder_and_dies_with_it(tmp_path: Path) -> None:
    results = tmp_path / "results"
    holder = hold_lock(results)
    try:
        warehouse = Warehouse(results)
        assert warehouse.lock_holder()["pid"] == holder.pid
        with pytest.raises(WarehouseBusy) as busy:
            with warehouse.writer_lock():
                pass
        message = str(busy.value)
        assert f"pid {holder.pid}" in message and "\n" not in message and str(results) in message
        assert isinstance(busy.value, UserError) and busy.value.exit_code == 2
    finally:
        holder.send_signal(signal.SIGKILL)  # no cleanup runs: the kernel drops the lock
        holder.wait()
    assert Warehouse(results).lock_holder() is None
    with Warehouse(results).writer_lock():  # not blocked by the dead holder
        pass


def test_a_second_sweep_is_refused_while_one_runs(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    tiny_cnn(tmp_path / "models" / "tiny.onnx", channels=16, spatial=32)
    measurement = {"warmup_ms": 10, "min_iterations": 5, "min_duration_ms": 200, "repeats": 2, "layer_iterations": 3}
    first = write_sweep(tmp_path, tiny_sweep_text("first", tuple(range(1, 7)), measurement=measurement),
                        name="first.toml")
    second = write_sweep(tmp_path, tiny_sweep_text("second", (1, 2, 3), measurement=measurement), name="second.toml")
    results = tmp_path / "results"

    def sweep(config: Path) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "farm", "sweep", str(config), "--results", str(results),
                                 "--executor", "local"], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    running = sweep(first)
    deadline = time.monotonic() + 120
    while not list((results / "first" / "cells").glob("*.parquet")) and time.monotonic() < deadline:
        time.sleep(0.02)  # until it is measuring: its lock held, its first cell written
    running.send_signal(signal.SIGSTOP)  # frozen mid-sweep, lock held, until both others have tried
    try:
        assert running.poll() is None, "the first sweep should still be running"
        others = [sweep(config) for config in (second, first)]  # another sweep, and the same one again
        refused = []
        for proc in others:
            _, err = proc.communicate(timeout=120)
            refused.append((proc.returncode, err))
    finally:
        running.send_signal(signal.SIGCONT)
    out, err = running.communicate(timeout=300)
    assert running.returncode == 0, err
    assert "removed" not in err  # nobody touched its files
    for rc, err in refused:
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and f"pid {running.pid}" in lines[0], err
        assert lines[0].startswith("farm: error:") and "farm sweep" in lines[0]

    later = sweep(second)  # once the first has finished
    _, err = later.communicate(timeout=300)
    assert later.returncode == 0, err

    con = Warehouse(results).connect()
    assert con.execute("SELECT sweep_id, count(*), count(DISTINCT cell_id) FROM cells GROUP BY 1 ORDER BY 1"
                       ).fetchall() == [("first", 6, 6), ("second", 3, 3)]
    assert con.execute("SELECT count(*), count(DISTINCT cell_id) FROM measurements").fetchone() == (9, 9)
    assert con.execute("SELECT count(*) FROM cells WHERE status = 'ok'").fetchone() == (9,)
    assert con.execute("SELECT sweep_id, count(*) FROM sweeps GROUP BY 1 ORDER BY 1").fetchall() == [
        ("first", 1), ("second", 1)]
    windows = sorted(con.execute("SELECT started_at, finished_at FROM cells").fetchall())
    for (_, end), (start, _) in zip(windows, windows[1:]):
        assert end <= start  # no two measurements at once


def test_ingest_is_refused_while_another_writer_holds_the_warehouse(tmp_path: Path, capsys) -> None:
    """`farm ingest` writes the warehouse too: while another writer holds it, ingest stops with one
    line naming the holder and writes nothing."""
    from farm.cli import main

    log = ROOT / "tests" / "fixtures" / "trt_seeds" / "mnist_trt80.trtexec_perf_summary.log"
    results = tmp_path / "results"
    holder = hold_lock(results)
    try:
        assert main(["ingest", str(log), "--results", str(results)]) == 2
        err = capsys.readouterr().err.strip()
        assert f"pid {holder.pid}" in err and "\n" not in err
        assert not list(results.rglob("*.parquet"))
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert main(["ingest", str(log), "--results", str(results)]) == 0
    assert len(list((results / "ingested" / "cells").glob("*.parquet"))) == 1


def test_a_probe_of_the_lock_does_not_turn_a_writer_away(tmp_path: Path) -> None:
    """`farm check` probes the lock with a shared flock for an instant, naming nobody: a writer
    starting at that instant waits the instant out instead of exiting 2 "(it did not say which)"."""
    results = tmp_path / "results"
    with Warehouse(results).writer_lock():
        pass
    probe = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\nfd = os.open(sys.argv[1], os.O_RDONLY)\n"
         "fcntl.flock(fd, fcntl.LOCK_SH)\nprint('probing', flush=True)\ntime.sleep(0.5)\n",
         str(results / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert probe.stdout.readline().strip() == "probing"
        with Warehouse(results).writer_lock():
            assert probe.poll() is not None  # it went on once the probe had let go
    finally:
        probe.kill()
        probe.wait()


def test_the_lock_file_is_shared_with_the_folder_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Created as the umask allows (group-writable under umask 002), and taken through a read-only
    descriptor where this user may not write another's lock file (flock needs no write access)."""
    import stat

    import farm.warehouse.lock as wh

    old = os.umask(0o002)
    try:
        with Warehouse(tmp_path / "results").writer_lock():
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "results" / ".lock").stat().st_mode) == 0o664
    real_open = os.open

    def refuse_writing(path, flags, *args):
        if str(path).endswith(".lock") and flags & (os.O_RDWR | os.O_WRONLY):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(wh.os, "open", refuse_writing)
    with Warehouse(tmp_path / "results").writer_lock():
        refused = hold_attempt(tmp_path / "results")
    assert refused == 2  # another writer was refused while the read-only descriptor held the lock


def hold_attempt(results: Path) -> int:
    """Exit status of another process trying to take the writer lock now."""
    return subprocess.run([sys.executable, "-c", "import sys\nfrom farm.warehouse import Warehouse, WarehouseBusy\n"
                           "try:\n    with Warehouse(sys.argv[1]).writer_lock():\n        sys.exit(0)\n"
                           "except WarehouseBusy:\n    sys.exit(2)\n", str(results)], cwd=ROOT, env=ENV).returncode


def test_ingest_into_a_folder_farm_did_not_write_is_refused(tmp_path: Path, capsys) -> None:
    """`farm ingest` is a writer too: a folder that is not a warehouse is refused, nothing touched."""
    from farm.cli import main
    from farm.warehouse import NotAWarehouse

    folder = tmp_path / "project"
    (folder / "src").mkdir(parents=True)
    (folder / "README.md").write_text("mine")
    with pytest.raises(NotAWarehouse) as refused:
        with Warehouse(folder).writer_lock():
            pass
    assert refused.value.exit_code == 2 and "is not a farm warehouse" in str(refused.value)
    log = ROOT / "tests" / "fixtures" / "trt_seeds" / "mnist_trt80.trtexec_perf_summary.log"
    assert main(["ingest", str(log), "--results", str(folder)]) == 2
    assert "is not a farm warehouse" in capsys.readouterr().err
    assert sorted(p.name for p in folder.rglob("*")) == ["README.md", "src"]


def test_readers_see_a_sweep_before_or_after_its_compaction(tmp_path: Path) -> None:
    """Readers in other processes, while a sweep is compacted: every read counts every row once."""
    from tests.test_warehouse import every_row, write_cells

    results = tmp_path / "results"
    warehouse = Warehouse(results)
    write_cells(warehouse, "s", [f"{i:016x}" for i in range(60)])
    expected = every_row(results)
    reader = (f"import sys, time; sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})\n"
              "from tests.test_warehouse import every_row\n"
              "from pathlib import Path\n"
              "import json\n"
              "seen = []\n"
              "deadline = time.monotonic() + 4\n"
              "while time.monotonic() < deadline:\n"
              f"    seen.append(every_row(Path({str(results)!r})))\n"
              "print(json.dumps(seen))\n")
    readers = [subprocess.Popen([sys.executable, "-c", reader], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    time.sleep(0.5)
    for size in (7, 25):  # compacted, then compacted again after some cells are redone
        warehouse.compact("s", block_cells=size)
        write_cells(warehouse, "s", [f"{i:016x}" for i in range(0, 60, 9)])  # the same rows again
    warehouse.compact("s", block_cells=25)
    import json

    reads = [read for process in readers for read in json.loads(process.communicate(timeout=120)[0])]
    assert all(p.returncode == 0 for p in readers)
    assert len(reads) >= 2
    assert all(read == expected for read in reads)


def test_a_cell_rewritten_while_a_reader_lists_its_table_keeps_its_rows(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A compacted cell written again (the same rows) just after a reader listed one of its tables:
    the reader's view still counts that cell's rows of the table once. (A reader that took the
    new `cells` file, listed after, as superseding the compacted rows lost them: the writer
    writes a cell's `cells` file last, after the listing.)"""
    from farm.warehouse.layout import WarehouseLayout
    from tests.test_warehouse import every_row, write_cells

    results = tmp_path / "results"
    warehouse = Warehouse(results)
    ids = [f"{i:016x}" for i in range(12)]
    write_cells(warehouse, "s", ids)
    warehouse.compact("s", block_cells=5)
    expected = every_row(results)
    listing = WarehouseLayout.loose_files
    rewritten = []

    def list_then_rewrite(layout, sweep: str, table: str):
        found = listing(layout, sweep, table)
        if table == "layers" and not rewritten:  # a writer redoes a cell right after this listing
            rewritten.append(ids[4])
            write_cells(Warehouse(results), "s", [ids[4]])
        return found

    monkeypatch.setattr(WarehouseLayout, "loose_files", list_then_rewrite)
    assert every_row(results) == expected
    assert rewritten == [ids[4]]
    assert (results / "s" / "cells" / f"{ids[4]}.parquet").is_file()  # the redo happened beside the read


def test_a_query_that_writes_is_refused_and_ctrl_c_stops_a_long_one(tmp_path: Path, capsys) -> None:
    """`farm query` only reads: a statement that may write files (COPY, CREATE, EXPORT) is one line
    and exit 2 and writes nothing, even into the warehouse while a sweep holds it; reads run beside a
    sweep. Ctrl-C stops a query DuckDB is in the middle of (exit 130), not at its end."""
    from farm.cli import main

    results = tmp_path / "results"
    holder = hold_lock(results)
    try:
        target = results / "copied.parquet"
        for sql in (f"COPY (SELECT 1 AS x) TO '{target}'", f"EXPORT DATABASE '{results / 'db'}'",
                    f"EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{target}' (FORMAT parquet)",  # ran the COPY once
                    f"SELECT 1; COPY (SELECT 1 AS x) TO '{target}'"):
            assert main(["query", sql, "--results", str(results)]) == 2
            assert "farm query only reads the warehouse" in capsys.readouterr().err
        assert not target.exists() and not (results / "db").exists()
        assert main(["query", "SELECT 42 AS answer", "--results", str(results), "--format", "csv"]) == 0
        assert capsys.readouterr().out == "answer\n42\n"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()

    endless = subprocess.Popen([sys.executable, "-m", "farm", "query", "SELECT count(*) FROM range(1000000000000000)",
                                "--results", str(results)], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=as_from_a_terminal)
    try:
        import psutil

        process, deadline = psutil.Process(endless.pid), time.monotonic() + 120
        # into DuckDB's execution (the query takes days): more CPU than farm's imports take
        while sum(process.cpu_times()[:2]) < 6 and time.monotonic() < deadline and endless.poll() is None:
            time.sleep(0.2)
        endless.send_signal(signal.SIGINT)
        assert endless.wait(timeout=120) == 130, endless.stderr.read()
        said = endless.stderr.read()
        assert "farm: interrupted" in said and "resume" not in said, said  # a query has nothing to resume
    finally:
        endless.kill()


def test_a_query_connection_opens_no_file_outside_the_warehouse_even_past_the_statement_check(tmp_path: Path) -> None:
    """Lock 1 under farm query's statement check: its DuckDB connection reads the warehouse and may
    open nothing else, whatever SQL reaches it, and no SQL can undo that."""
    import duckdb

    from farm.cli.common import connect
    from farm.sql_console.sandbox import lock

    results = tmp_path / "results"
    results.mkdir()
    warehouse, con = connect(str(results))
    lock(con, warehouse.root, tmp_path / "spill")
    outside = tmp_path / "outside.csv"
    outside.write_text("a\n1\n")
    for sql in (f"COPY (SELECT 1) TO '{tmp_path / 'written.parquet'}'", f"SELECT * FROM read_csv('{outside}')",
                "SET enable_external_access = true"):
        with pytest.raises(duckdb.Error):
            con.execute(sql)
    assert not (tmp_path / "written.parquet").exists()
    assert con.execute("SELECT count(*) FROM cells").fetchall() == [(0,)]


def test_a_folder_that_is_not_a_warehouse_is_said_to_readers_not_answered_with_no_rows(tmp_path: Path, capsys) -> None:
    from farm.cli import main

    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "notes.txt").write_text("mine")
    assert main(["query", "SELECT count(*) FROM cells", "--results", str(tmp_path / "project")]) == 2
    assert "is not a farm warehouse: it holds notes.txt" in capsys.readouterr().err
    assert main(["ls", "--results", str(tmp_path / "project")]) == 2


def as_from_a_terminal() -> None:
    """In a child about to start: Ctrl-C (SIGINT) handled as in a terminal's foreground. A test run
    started in the background (`bash .ci/run &`) has it ignored, and a child that inherits that
    ignores Ctrl-C for good (Python then installs no handler of its own)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


EARLY_CTRL_C = """
import _thread, threading, time
import duckdb
from farm.cli.query import _interruptible
con = duckdb.connect(":memory:")
def query():
    time.sleep(1.0)  # still preparing when Ctrl-C comes
    return con.execute("SELECT count(*) FROM range(1000000000000000)").fetchall()
threading.Timer(0.2, _thread.interrupt_main).start()
started = time.monotonic()
try:
    _interruptible(con, query)
except KeyboardInterrupt:
    print(f"stopped after {time.monotonic() - started:.1f} s", flush=True)
"""


def test_ctrl_c_before_duckdb_starts_the_statement_still_stops_it() -> None:
    """Ctrl-C that comes while the query's thread is still preparing the statement: DuckDB forgets an
    interrupt that comes before a statement starts, so farm query interrupts again until it stops
    (a single interrupt left the statement running for days, and the command waiting on it). In a
    process of its own: Ctrl-C goes to a main thread, which a test worker's may not be."""
    done = subprocess.run([sys.executable, "-c", EARLY_CTRL_C], cwd=ROOT, env=ENV, capture_output=True, text=True,
                          timeout=120, preexec_fn=as_from_a_terminal)
    found = re.search(r"stopped after ([\d.]+) s", done.stdout)
    assert found and float(found.group(1)) < 30, done.stdout + done.stderr
