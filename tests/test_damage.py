"""A damaged file costs only its cell: every reader skips it with one warning naming it, `farm
sweep` moves it aside and measures its cell again, and `farm check` finds damaged, orphaned and
temporary files (and with --fix resolves them)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from farm.cli import main
from farm.dashboard.data import Snapshot
from farm.dashboard.sql import run_query
from farm.warehouse import DAMAGED_DIR_NAME, SCHEMAS, TABLES, Warehouse
from tests.conftest import tiny_cnn, write_sweep

ROOT = Path(__file__).resolve().parent.parent
SWEEP = """
name = "tiny"
[[models]]
source = "models/tiny.onnx"
[axes]
batch_sizes = [1, 2]
"""


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A base folder with models/, sweep.toml and results/: two ok cells with a file in every table."""
    base = tmp_path_factory.mktemp("damage")
    (base / "models").mkdir()
    tiny_cnn(base / "models" / "tiny.onnx")
    write_sweep(base, SWEEP)
    assert main(["sweep", str(base / "sweep.toml"), "--results", str(base / "results"), "--executor", "local"]) == 0
    for table in TABLES:
        assert list((base / "results" / "tiny" / table).glob("*.parquet")), table
    return base


def copy_of(measured: Path, tmp_path: Path) -> Path:
    shutil.copytree(measured, tmp_path / "w", ignore=shutil.ignore_patterns(".cache"))
    return tmp_path / "w"


def counts(results: Path) -> dict[str, int]:
    con = Warehouse(results, warn=lambda _: None).connect()
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}


@pytest.mark.parametrize("table", TABLES)
def test_one_truncated_file_costs_only_its_cell(measured: Path, tmp_path: Path, table: str, capsys) -> None:
    base = copy_of(measured, tmp_path)
    results = base / "results"
    con = Warehouse(results).connect()
    cells = [r[0] for r in con.execute("SELECT cell_id FROM cells ORDER BY batch").fetchall()]
    victim_cell, other_cell = cells
    before = counts(results)
    directory = results / "tiny" / table
    victim = directory / f"{victim_cell}.parquet" if table not in ("sweeps", "devices") else \
        next(directory.glob("*.parquet"))
    rows = pq.read_table(victim).num_rows
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])  # truncated, as a full disk or a crash leaves it
    capsys.readouterr()

    def one_warning(expected: tuple[int, ...] = (1,)) -> str:
        out, err = capsys.readouterr()
        warnings = [line for line in err.splitlines() if line.startswith("farm: warning:")]
        assert len(warnings) in expected and all(str(victim) in w for w in warnings) and "Traceback" not in err, err
        return out

    where = ["--results", str(results)]
    assert main(["query", "SELECT 1", *where]) == 0
    one_warning()
    assert main(["query", f"SELECT count(*) AS n FROM {table}", *where, "--format", "csv"]) == 0
    remaining = before[table] - rows if table != "devices" else 0  # one device: its only file
    assert one_warning() == f"n\n{remaining}\n"
    assert main(["ls", *where]) == 0
    assert "tiny" in one_warning()
    assert main(["show", "tiny", *where, "--format", "csv"]) == 0
    shown = one_warning().splitlines()
    assert len(shown) == 1 + (1 if table == "cells" else 2)
    assert main(["report", "tiny", "-o", str(tmp_path / "report.html"), *where]) == 0
    # The report reads no samples, and the layers of one cell only (the fastest): a file it does
    # not read costs nothing and says nothing.
    one_warning((0,) if table == "samples" else (0, 1) if table == "layers" else (1,))
    assert main(["graph", other_cell[:8], "-o", str(tmp_path / "engine.dot"), *where]) == 0
    one_warning()
    snap = Snapshot(results)  # the dashboard's data layer
    assert len(snap.cell_frame) == (1 if table == "cells" else 2)
    if table in ("samples", "layers"):  # read per cell, when a page shows the cell
        assert snap.cell_file(victim_cell, table).empty and not snap.cell_file(other_cell, table).empty
    assert list(snap.damaged) == [victim]
    one_warning()
    console = run_query(results, f"SELECT count(*) AS n FROM {table}")  # the dashboard's SQL console
    assert console.frame.n.tolist() == [remaining]

    assert main(["check", *where]) == 1
    out = capsys.readouterr().out
    assert f"damaged  {victim}: not a whole Parquet file" in out and "1 damaged" in out

    # A rerun moves the file aside and measures its cell again (a cell's file: with its cells file).
    assert main(["sweep", str(base / "sweep.toml"), *where, "--executor", "local"]) == 0
    err = capsys.readouterr().err
    assert f"moved damaged file {victim}" in err and "Traceback" not in err
    assert (results / "tiny" / DAMAGED_DIR_NAME / table / victim.name).is_file()
    run_of = dict(Warehouse(results).connect().execute("SELECT cell_id, run_id FROM cells").fetchall())
    if table in ("sweeps", "devices"):  # not a file of one cell: nothing to measure again
        assert run_of[victim_cell] == run_of[other_cell]
        assert counts(results)[table] == before[table] - (rows if table == "sweeps" else 1)
    else:
        assert run_of[victim_cell] != run_of[other_cell]  # measured again, by the rerun
        assert counts(results) == {**before, "sweeps": before["sweeps"] + 1, "samples": counts(results)["samples"]}
    assert main(["check", *where]) == 0
    assert "clean" in capsys.readouterr().out


def test_a_file_whose_inside_is_damaged_is_skipped_when_read(measured: Path, tmp_path: Path, capsys) -> None:
    """Both ends whole, the footer garbage: the byte check passes, DuckDB fails on it, the reader
    leaves it out and runs the query again; `farm check` parses the footer and finds it."""
    results = copy_of(measured, tmp_path) / "results"
    victim = next((results / "tiny" / "cells").glob("*.parquet"))
    data = victim.read_bytes()
    victim.write_bytes(data[:-300] + b"\x07" * 292 + data[-8:])
    capsys.readouterr()
    assert main(["query", "SELECT count(*) AS n FROM cells", "--results", str(results), "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert out == "n\n1\n" and err.count("farm: warning:") == 1 and str(victim) in err
    assert len(Snapshot(results).cell_frame) == 1
    assert main(["check", "--results", str(results)]) == 1
    assert f"damaged  {victim}: unreadable footer" in capsys.readouterr().out


def test_check_finds_orphans_temporary_files_and_wrong_schemas_and_fix_resolves_them(
        measured: Path, tmp_path: Path, capsys) -> None:
    base = copy_of(measured, tmp_path)
    results = base / "results"
    sweep = results / "tiny"
    cell = next((sweep / "cells").glob("*.parquet")).stem
    # a cell file with no cells file (an interrupted run), temporary files, a file of no table,
    # a samples file where a measurement should be, a folder of no table, and a cache leftover
    shutil.copy(sweep / "samples" / f"{cell}.parquet", sweep / "samples" / "unfinished.parquet")
    (sweep / "layers" / ".unfinished.parquet.4242.tmp").write_bytes(b"PAR1 half")
    (sweep / "cells" / "notes.txt").write_text("mine")
    (sweep / "measurements" / f"{cell}.parquet").unlink()
    shutil.copy(sweep / "samples" / f"{cell}.parquet", sweep / "measurements" / f"{cell}.parquet")
    (sweep / "plots").mkdir()
    (sweep / "plots" / "a.png").write_bytes(b"png")
    (results / ".cache" / "tmp").mkdir(parents=True)
    (results / ".cache" / "tmp" / "resnet50-v1.onnx.4242.tmp").write_bytes(b"\0" * 1000)
    (results / ".cache" / "zoo").mkdir()
    (results / ".cache" / "zoo" / ".resnet50-v1.onnx.4242.tmp").write_bytes(b"\0" * 1000)
    (results / "examples" / "gpu" / "cells").mkdir(parents=True)  # a nested warehouse: not a sweep, left alone
    (results / "examples" / "gpu" / "cells" / "x.parquet").write_bytes(b"not checked")
    capsys.readouterr()

    assert main(["check", "--results", str(results)]) == 1
    out = capsys.readouterr().out
    expected = {
        f"orphan   {sweep / 'samples' / 'unfinished.parquet'}: no cells file",
        f"temp     {sweep / 'layers' / '.unfinished.parquet.4242.tmp'}: temporary file",
        f"orphan   {sweep / 'cells' / 'notes.txt'}: not a Parquet file of the cells table",
        f"damaged  {sweep / 'measurements' / cell}.parquet: wrong schema",
        f"orphan   {sweep / 'plots'}: a folder of no warehouse table",
        f"temp     {results / '.cache' / 'tmp' / 'resnet50-v1.onnx.4242.tmp'}: temporary",
        f"temp     {results / '.cache' / 'zoo' / '.resnet50-v1.onnx.4242.tmp'}: temporary",
    }
    lines = out.splitlines()
    for start in expected:
        assert any(line.startswith(start) for line in lines), (start, out)
    assert len(lines) == len(expected) + 1 and "1 damaged, 3 orphaned, 3 temporary" in lines[-1]
    assert "examples" not in out

    assert main(["check", "--fix", "--results", str(results)]) == 1  # it found something: exit 1, fixed
    out = capsys.readouterr().out
    assert "moved to tiny/.damaged/measurements" in out and "with its cell's cells file" in out
    assert main(["check", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "clean" in out and "moved aside earlier" in out
    damaged = sweep / DAMAGED_DIR_NAME
    assert (damaged / "plots" / "a.png").is_file() and (damaged / "cells" / "notes.txt").is_file()
    assert (damaged / "cells" / f"{cell}.parquet").is_file()  # un-marked: the next sweep measures it again
    assert not (sweep / "samples" / f"{cell}.parquet").exists() and not list(results.rglob("*.tmp"))
    assert (results / "examples" / "gpu" / "cells" / "x.parquet").is_file()
    assert main(["sweep", str(base / "sweep.toml"), "--results", str(results), "--executor", "local"]) == 0
    assert "1 to run" in capsys.readouterr().err
    assert counts(results)["cells"] == 2 and counts(results)["measurements"] == 2


def test_check_leaves_a_running_writer_alone(measured: Path, tmp_path: Path, capsys) -> None:
    results = copy_of(measured, tmp_path) / "results"
    tmp = results / "tiny" / "samples" / ".in-flight.parquet.4242.tmp"
    tmp.write_bytes(b"PAR1 being written")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom farm.warehouse import Warehouse\n"
         "with Warehouse(sys.argv[1]).writer_lock():\n    print('locked', flush=True)\n    time.sleep(120)\n",
         str(results)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert main(["check", "--results", str(results)]) == 0  # its work in progress is no finding
        out = capsys.readouterr().out
        assert f"pid {holder.pid}" in out and "1 file(s) of its work in progress" in out
        assert main(["check", "--fix", "--results", str(results)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"pid {holder.pid}" in err and "farm check" not in err
        assert tmp.exists()
    finally:
        holder.kill()
        holder.wait()
    assert main(["check", "--results", str(results)]) == 1  # the writer is gone: now it is a leftover
    assert "temporary file" in capsys.readouterr().out


def test_schemas_of_the_fixture_are_what_check_expects(measured: Path) -> None:
    from farm.warehouse import file_problem, schema_problem

    for table in TABLES:
        for path in (measured / "results" / "tiny" / table).glob("*.parquet"):
            assert file_problem(path) is None and schema_problem(path, table) is None
    assert set(SCHEMAS) == set(TABLES)


def test_the_dashboard_names_a_damaged_file_and_shows_the_rest(measured: Path, tmp_path: Path, monkeypatch) -> None:
    from tests.dashboard.test_app import metrics, open_page

    results = copy_of(measured, tmp_path) / "results"
    victim = next((results / "tiny" / "cells").glob("*.parquet"))
    victim.write_bytes(victim.read_bytes()[:100])
    at = open_page(monkeypatch, results, "overview")
    (warning,) = [w.value for w in at.warning if "damaged" in w.value]
    assert warning.startswith("**1 damaged file(s) left out**") and str(victim) in warning
    assert metrics(at)["Cells"] == "1"  # the other cell is still there
