"""A damaged file costs only its cell: every reader skips it with one warning naming it, `farm
sweep` moves it aside and measures its cell again, and `farm check` finds damaged, orphaned and
temporary files (and with --fix resolves them)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from farm.cli import main
from farm.dashboard.data import Snapshot
from farm.sql_console.console import run_query
from farm.warehouse import DAMAGED_DIR_NAME, SCHEMAS, TABLES, Warehouse
from tests.conftest import swept_tiny, tiny_sweep_text

ROOT = Path(__file__).resolve().parent.parent
SWEEP = tiny_sweep_text("tiny")
# every table but `serving`, which only serving cells write (a per-cell table as `accuracy` is, read
# and repaired by the same code): two offline cells here, each with a file in every other table
DAMAGED_TABLES = tuple(t for t in TABLES if t != "serving")


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A base folder with models/, sweep.toml and results/: two ok cells with a file in every table."""
    base = tmp_path_factory.mktemp("damage")
    swept_tiny(base, SWEEP)
    for table in DAMAGED_TABLES:
        assert list((base / "results" / "tiny" / table).glob("*.parquet")), table
    return base


def copy_of(measured: Path, tmp_path: Path) -> Path:
    shutil.copytree(measured, tmp_path / "w", ignore=shutil.ignore_patterns(".cache"))
    return tmp_path / "w"


def counts(results: Path) -> dict[str, int]:
    con = Warehouse(results, warn=lambda _: None).connect()
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}


@pytest.mark.parametrize("table", DAMAGED_TABLES)
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
    footer = int.from_bytes(data[-8:-4], "little")  # the whole footer: its end is only key-value metadata
    victim.write_bytes(data[:-8 - footer] + b"\x07" * footer + data[-8:])
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
    assert (damaged / "samples" / "unfinished.parquet").is_file()  # an orphan is moved aside, not deleted
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


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("farm: error:") and "Traceback" not in err, err
    return lines[0]


def test_a_relative_results_folder_with_a_damaged_file(measured: Path, tmp_path: Path, capsys,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The default `--results results` is relative: every reader, and the end-of-sweep summary
    when another sweep of the warehouse has a damaged file, skips the file with one warning."""
    base = copy_of(measured, tmp_path)
    shutil.copytree(base / "results" / "tiny", base / "results" / "other")  # another sweep of the warehouse
    victim = sorted((base / "results" / "other" / "cells").glob("*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[:100])
    monkeypatch.chdir(base)
    where = ["--results", "results"]
    cell = sorted((base / "results" / "tiny" / "cells").glob("*.parquet"))[0].stem
    capsys.readouterr()
    for argv in (["query", "SELECT count(*) FROM cells"], ["ls"], ["show", "other"], ["graph", cell[:8], "-o", "e.dot"],
                 ["report", "other", "-o", "r.html"]):
        assert main([*argv, *where]) == 0, argv
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.count("farm: warning: skipped damaged file") == 1, (argv, err)
        assert str(base / "results" / "other" / "cells" / victim.name) in err
    assert main(["sweep", "sweep.toml", *where, "--executor", "local"]) == 0  # resumes tiny; reads other in its summary
    err = capsys.readouterr().err
    assert "Traceback" not in err and "skipped damaged file" in err and victim.is_file()


def snapshot(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def test_a_folder_farm_did_not_write_is_refused_by_every_writer(measured: Path, tmp_path: Path, capsys,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A project folder (with a folder of a table's name and a Parquet file in it) and a home
    folder (with a .cache of temp and work folders) are not warehouses: `farm sweep`, `farm check
    --fix` and `farm check` exit 2 with one line and touch nothing."""
    import pyarrow as pa

    proj = tmp_path / "proj"
    project = proj / "myproject"
    (project / "samples").mkdir(parents=True)
    pq.write_table(pa.table({"cell_id": ["a"], "latency_ms": [1.0]}), project / "samples" / "data.parquet")
    (project / "src").mkdir()
    (project / "src" / "main.py").write_text("print('mine')\n")
    (project / ".git").mkdir()
    (project / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (project / "README.md").write_text("mine\n")
    home = tmp_path / "home"
    for path in (home / ".cache" / "tmp" / "download.part", home / ".cache" / "work" / "notes.txt",
                 home / ".cache" / "pip" / ".wheel.tmp1", home / "Documents" / "cv.pdf"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"mine")
    sweep = str(measured / "sweep.toml")
    for folder, argvs in ((proj, [["--results", str(proj)], ["--results", str(project)]]),
                          (home, [["--results", str(home)], ["--results", "."], ["--results", ""]])):
        monkeypatch.chdir(folder)
        before = snapshot(folder)
        for where in argvs:
            for argv in (["sweep", sweep, "--executor", "local"], ["check", "--fix"], ["check"]):
                capsys.readouterr()
                assert main([*argv, *where]) == 2, (argv, where)
                line = one_line_error(capsys.readouterr().err)
                assert "is not a farm warehouse" in line, line
                if argv[0] == "sweep":
                    assert line.endswith("pass an empty or new folder to --results (nothing was written)"), line
            assert snapshot(folder) == before, where


def test_what_counts_as_a_warehouse(measured: Path, tmp_path: Path, capsys) -> None:
    """A new or empty folder becomes one (its first writer writes the marker); a warehouse an
    older farm wrote has no marker and is recognised by its files' metadata (then marked); a
    folder of such warehouses, as results/ holds examples/results/, is one too. Readers never
    need the marker."""
    import json

    from farm import __version__
    from farm.warehouse import MARKER_NAME, SCHEMA_VERSION

    assert Warehouse(ROOT / "examples" / "results").not_a_warehouse() is None  # committed, without a marker
    assert not (ROOT / "examples" / "results" / MARKER_NAME).exists()
    sweep = str(measured / "sweep.toml")
    empty = tmp_path / "empty"
    empty.mkdir()
    for folder in (tmp_path / "new" / "deeper", empty):
        assert main(["sweep", sweep, "--results", str(folder), "--executor", "local"]) == 0
        assert json.loads((folder / MARKER_NAME).read_text()) == {"farm_version": __version__,
                                                                   "schema_version": SCHEMA_VERSION}
    legacy = copy_of(measured, tmp_path) / "results"
    (legacy / MARKER_NAME).unlink()
    capsys.readouterr()
    assert main(["query", "SELECT count(*) AS n FROM cells", "--results", str(legacy), "--format", "csv"]) == 0
    assert capsys.readouterr().out == "n\n2\n" and not (legacy / MARKER_NAME).exists()  # readers write nothing
    assert main(["check", "--fix", "--results", str(legacy)]) == 0 and (legacy / MARKER_NAME).is_file()
    project = tmp_path / "project"  # a farm cell file copied beside a project's own files: no warehouse
    (project / "analysis" / "cells").mkdir(parents=True)
    shutil.copy(next((legacy / "tiny" / "cells").glob("*.parquet")), project / "analysis" / "cells")
    (project / "notes.txt").write_text("mine")
    before = sorted(str(p.relative_to(project)) for p in project.rglob("*"))
    assert main(["check", "--fix", "--results", str(project)]) == 2
    assert "is not a farm warehouse" in capsys.readouterr().err
    assert sorted(str(p.relative_to(project)) for p in project.rglob("*")) == before  # nothing written or moved
    holder = tmp_path / "holder"  # a folder that holds a warehouse is not one: results/ holds none
    shutil.copytree(ROOT / "examples" / "results", holder / "examples", ignore=shutil.ignore_patterns(".cache"))
    assert "is not a farm warehouse" in Warehouse(holder).not_a_warehouse()


def test_an_ok_cell_left_without_its_measurement_is_measured_again(measured: Path, tmp_path: Path, capsys) -> None:
    """An older farm, killed while it moved a damaged measurements file aside, left the cell's
    `cells` file (ok) behind: `farm check` names it, --fix un-marks it, and a sweep measures it
    again even without a check."""
    base = copy_of(measured, tmp_path)
    results = base / "results"
    cell = sorted((results / "tiny" / "cells").glob("*.parquet"))[0].stem
    (results / "tiny" / DAMAGED_DIR_NAME / "measurements").mkdir(parents=True)
    os.replace(results / "tiny" / "measurements" / f"{cell}.parquet",
               results / "tiny" / DAMAGED_DIR_NAME / "measurements" / f"{cell}.parquet")  # the kill came here
    survivor = tmp_path / "survivor"
    shutil.copytree(results, survivor)
    capsys.readouterr()
    assert main(["check", "--results", str(results)]) == 1
    out = capsys.readouterr().out
    assert f"unmeasured {results / 'tiny' / 'cells' / cell}.parquet: an ok cell with no measurements file" in out
    assert "1 unmeasured" in out
    assert main(["check", "--fix", "--results", str(results)]) == 1
    assert "un-marked: the next sweep measures the cell again" in capsys.readouterr().out
    assert main(["check", "--results", str(results)]) == 0
    for folder in (results, survivor):  # fixed first, and not
        capsys.readouterr()
        assert main(["sweep", str(base / "sweep.toml"), "--results", str(folder), "--executor", "local"]) == 0
        assert "1 to run" in capsys.readouterr().err
        assert counts(folder)["measurements"] == 2


def test_a_fifo_in_a_table_folder_is_moved_aside_not_waited_on(measured: Path, tmp_path: Path) -> None:
    base = copy_of(measured, tmp_path)
    results = base / "results"
    fifo = results / "tiny" / "samples" / "fifo.parquet"
    os.mkfifo(fifo)
    run = [sys.executable, "-m", "farm"]
    query = subprocess.run([*run, "query", "SELECT count(*) FROM samples", "--results", str(results)],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert query.returncode == 0 and f"skipped damaged file {fifo} (not a regular file)" in query.stderr, query.stderr
    sweep = subprocess.run([*run, "sweep", str(base / "sweep.toml"), "--results", str(results), "--executor", "local"],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert sweep.returncode == 0 and f"moved damaged file {fifo}" in sweep.stderr, sweep.stderr
    assert "not a regular file" in sweep.stderr and not os.path.lexists(fifo)


def test_glob_characters_in_the_results_path(measured: Path, tmp_path: Path, capsys) -> None:
    """`--results '/tmp/w[1]'` names that folder, not `/tmp/w1`; a damaged file in it is skipped."""
    results = tmp_path / "w[1]"
    shutil.copytree(measured / "results", results, ignore=shutil.ignore_patterns(".cache"))
    decoy = tmp_path / "w1"  # what the glob w[1] would match
    shutil.copytree(measured / "results", decoy, ignore=shutil.ignore_patterns(".cache"))
    shutil.copytree(decoy / "tiny", decoy / "more")
    where = ["--results", str(results)]
    capsys.readouterr()
    assert main(["query", "SELECT count(*) AS n FROM cells", *where, "--format", "csv"]) == 0
    assert capsys.readouterr().out == "n\n2\n"
    victim = sorted((results / "tiny" / "cells").glob("*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[:100])
    for argv in (["query", "SELECT count(*) AS n FROM cells", "--format", "csv"], ["ls"], ["show", "tiny"]):
        assert main([*argv, *where]) == 0
        out, err = capsys.readouterr()
        assert "Traceback" not in err and err.count(f"skipped damaged file {victim}") == 1, err
        if argv[0] == "query":
            assert out == "n\n1\n"
    other = sorted((results / "tiny" / "cells").glob("*.parquet"))[1].stem
    for argv in (["graph", other[:8], "-o", str(tmp_path / "e.dot")], ["report", "tiny", "-o", str(tmp_path / "r.html")]):
        assert main([*argv, *where]) == 0
        assert "Traceback" not in capsys.readouterr().err
    snap = Snapshot(results)
    assert len(snap.cell_frame) == 1 and not snap.cell_file(other, "samples").empty
    assert main(["check", *where]) == 1 and f"damaged  {victim}" in capsys.readouterr().out


def test_a_fifo_where_farm_reads_a_footer_blocks_nothing(measured: Path, tmp_path: Path) -> None:
    """`farm check` (statuses of cells without a measurement) and the test of whether a folder is a
    warehouse read footers: a FIFO there is passed over, not waited on."""
    results = copy_of(measured, tmp_path) / "results"
    os.mkfifo(results / "tiny" / "cells" / "fifo.parquet")
    project = tmp_path / "project"
    (project / "x" / "cells").mkdir(parents=True)
    os.mkfifo(project / "x" / "cells" / "a.parquet")
    (project / "notes.txt").write_text("mine")
    run = [sys.executable, "-m", "farm", "check", "--results"]
    check = subprocess.run([*run, str(results)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert check.returncode == 1 and "fifo.parquet: not a Parquet file of the cells table" in check.stdout, check
    refused = subprocess.run([*run, str(project)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "is not a farm warehouse" in refused.stderr, refused


def test_a_compacted_sweep_resumes_and_check_fix_handles_a_damaged_compacted_file(measured: Path, tmp_path: Path,
                                                                                    capsys) -> None:
    """`farm compact`, then a rerun skips every compacted cell; a damaged compacted file is skipped
    with a warning by readers, and `farm check --fix` moves it aside: its cells are measured again."""
    base = copy_of(measured, tmp_path)
    results = base / "results"
    before = counts(results)
    assert main(["compact", "--results", str(results)]) == 0
    assert "tiny: 2 cell(s) compacted" in capsys.readouterr().out
    assert counts(results) == before
    sweep = ["sweep", str(base / "sweep.toml"), "--results", str(results), "--executor", "local"]
    assert main(sweep) == 0
    assert "0 to run" in capsys.readouterr().err
    damaged = results / "tiny" / "layers" / "part-000001-0000.parquet"
    damaged.write_bytes(b"PAR1 not any more")
    assert main(["query", "--results", str(results), "SELECT count(*) AS n FROM cells"]) == 0
    captured = capsys.readouterr()
    assert f"skipped damaged compacted file {damaged}" in captured.err and "2" in captured.out
    assert main(["check", "--results", str(results)]) == 1
    assert f"damaged  {damaged}" in capsys.readouterr().out
    assert main(["check", "--fix", "--results", str(results)]) == 1
    assert main(["check", "--results", str(results)]) == 0
    capsys.readouterr()
    assert main(sweep) == 0
    assert "2 to run" in capsys.readouterr().err
    after = counts(results)  # every row once more (and the rerun's own run row; samples as many as were timed)
    assert {t: n for t, n in after.items() if t not in ("sweeps", "samples")} == \
        {t: n for t, n in before.items() if t not in ("sweeps", "samples")}
    con = Warehouse(results, warn=lambda _: None).connect()
    assert con.execute("SELECT count(DISTINCT cell_id) FROM samples").fetchone() == (2,)


def snapshot_tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_links_out_of_the_warehouse_are_reported_and_never_followed(measured: Path, tmp_path: Path, capsys) -> None:
    """A sweep folder linked to a folder elsewhere, and a table file linked to a Parquet file
    elsewhere: every reader leaves them out, `farm check` lists them (and --fix leaves them and what
    they point at alone), compact and sweep neither read nor write through them."""
    base = copy_of(measured, tmp_path)
    results = base / "results"
    outside = tmp_path / "outside"
    shutil.copytree(results / "tiny", outside / "elsewhere")
    (results / "linked").symlink_to(outside / "elsewhere", target_is_directory=True)
    cell = next((results / "tiny" / "cells").glob("*.parquet"))
    foreign = outside / "foreign.parquet"
    shutil.copy(cell, foreign)
    (results / "tiny" / "cells" / "0123456789abcdef.parquet").symlink_to(foreign)
    before = snapshot_tree(outside)
    assert counts(results)["cells"] == 2  # neither the linked sweep nor the linked file is read
    capsys.readouterr()
    assert main(["check", "--results", str(results)]) == 1
    out = capsys.readouterr().out
    assert out.count("a symbolic link: farm never reads or writes through one") == 2, out
    assert main(["check", "--fix", "--results", str(results)]) in (0, 1)
    assert main(["compact", "linked", "--results", str(results)]) == 2
    assert "no sweep 'linked'" in capsys.readouterr().err
    assert main(["compact", "--results", str(results)]) in (0, 1)
    assert (results / "linked").is_symlink() and (results / "tiny" / "cells" / "0123456789abcdef.parquet").is_symlink()
    sweep = (base / "sweep.toml").read_text().replace('name = "tiny"', 'name = "linked"')
    (base / "linked.toml").write_text(sweep)
    assert main(["sweep", str(base / "linked.toml"), "--results", str(results), "--executor", "local"]) == 2
    assert "is a symbolic link: farm writes nothing through a link" in capsys.readouterr().err
    assert snapshot_tree(outside) == before  # nothing there was written, moved or removed


def test_a_damaged_compaction_manifest_never_costs_its_blocks(measured: Path, tmp_path: Path, capsys) -> None:
    """compaction.json cut short: readers leave the compacted rows out and say so; check --fix
    rebuilds it from the one generation of blocks present (every cell counted again), and with two
    generations, where which counts cannot be told, it leaves the manifest and every block alone."""
    from farm.warehouse.layout import MANIFEST_NAME

    base = copy_of(measured, tmp_path)
    results = base / "results"
    Warehouse(results).compact("tiny")
    manifest = results / "tiny" / MANIFEST_NAME
    parts = sorted(p.relative_to(results) for p in results.rglob("part-*.parquet"))
    assert parts and not list((results / "tiny" / "cells").glob("[0-9a-f]*.parquet"))
    manifest.write_text(manifest.read_text()[:20])
    assert counts(results)["cells"] == 0  # unreadable: its rows are left out, with a warning
    assert main(["check", "--fix", "--results", str(results)]) == 1
    assert "rebuilt from its 1 compacted block(s) (2 cells)" in capsys.readouterr().out
    assert sorted(p.relative_to(results) for p in results.rglob("part-*.parquet")) == parts
    assert counts(results)["cells"] == 2 and counts(results)["samples"] > 0

    cells_part = results / parts[0]
    shutil.copy(cells_part, cells_part.with_name(cells_part.name.replace("part-000001", "part-000002")))
    manifest.write_text("{")
    assert main(["check", "--fix", "--results", str(results)]) == 1
    assert "left as it is, and every compacted file with it" in capsys.readouterr().out
    assert manifest.read_text() == "{" and all((results / p).is_file() for p in parts)


def test_a_cell_file_copied_over_another_cells_is_found(measured: Path, tmp_path: Path, capsys) -> None:
    """cells/B.parquet overwritten with cell A's file: readers would show A twice and B never.
    farm check names it from the footer (no row read); --fix moves it aside, so B is measured again."""
    base = copy_of(measured, tmp_path)
    results = base / "results"
    first, second = sorted((results / "tiny" / "cells").glob("*.parquet"))
    shutil.copy(first, second)
    assert main(["check", "--results", str(results)]) == 1
    out = capsys.readouterr().out
    assert f"its rows are of cell {first.stem}, not of {second.stem}" in out, out
    assert main(["check", "--fix", "--results", str(results)]) == 1
    con = Warehouse(results, warn=lambda _: None).connect()
    assert con.execute("SELECT list(cell_id) FROM cells").fetchone()[0] == [first.stem]
    capsys.readouterr()
    assert main(["check", "--results", str(results)]) == 0


def as_nobody_on_a_read_only_copy(measured: Path, prepare, *args: str) -> subprocess.CompletedProcess:
    """`python -m farm ARGS` (RESULTS in them: the copy's results folder) on a read-only copy of
    `measured` that `prepare(base)` changed first. Root may write anything, so as root it runs as
    `nobody` (setpriv) on a copy that user can read."""
    import stat
    import tempfile

    as_nobody: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: no user here is refused a write")
        as_nobody = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    home = Path(tempfile.mkdtemp(prefix="farm-readonly-"))
    try:
        base = copy_of(measured, home)
        prepare(base)
        for path in [home, *home.rglob("*")]:
            path.chmod(stat.S_IMODE(path.stat().st_mode) & ~0o222 | (0o555 if path.is_dir() else 0o444))
        env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        command = [str(base / "results") if a == "RESULTS" else str(base / a[5:]) if a.startswith("BASE/") else a
                   for a in args]
        return subprocess.run([*as_nobody, sys.executable, "-m", "farm", *command], capture_output=True, text=True,
                              env=env, timeout=300, cwd=home)
    finally:
        for path in [home, *home.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        shutil.rmtree(home, ignore_errors=True)


def test_a_warehouse_the_writer_cannot_change_is_one_line(measured: Path) -> None:
    """An unfinished cell's file in a warehouse this user may not write (read-only folders): `farm
    sweep` says which path and what to do in one line (exit 2), never a traceback from its repair."""
    def unfinished_cell(base: Path) -> None:
        samples = base / "results" / "tiny" / "samples"
        shutil.copy(next(samples.glob("*.parquet")), samples / "0123456789abcdef.parquet")  # a cell never finished

    done = as_nobody_on_a_read_only_copy(measured, unfinished_cell, "sweep", "BASE/sweep.toml", "--results",
                                         "RESULTS", "--executor", "local")
    err = done.stderr
    assert done.returncode == 2 and "Traceback" not in err, err
    [line] = [text for text in err.splitlines() if text.startswith("farm: ")]
    assert "cannot write" in line and "0123456789abcdef.parquet" in line and "not writable" in line, err


def test_check_fix_on_a_warehouse_it_cannot_change_says_so_per_file(measured: Path) -> None:
    """`farm check --fix` where this user may not write: each finding says it was not resolved and
    why, the count says how many; no traceback, and nothing is lost."""
    def orphan_and_damaged(base: Path) -> None:
        samples = base / "results" / "tiny" / "samples"
        shutil.copy(next(samples.glob("*.parquet")), samples / "0123456789abcdef.parquet")  # an orphan
        (base / "results" / "tiny" / "layers" / "ffffffffffffffff.parquet").write_bytes(b"PAR1 not a file")

    done = as_nobody_on_a_read_only_copy(measured, orphan_and_damaged, "check", "--fix", "--results", "RESULTS")
    out = done.stdout
    assert done.returncode == 1 and "Traceback" not in done.stderr + out, done.stderr + out
    refused = [line for line in out.splitlines() if "not resolved: cannot write" in line]
    assert len(refused) == 2 and all("not writable" in line for line in refused), out
    assert "0123456789abcdef.parquet" in out and "ffffffffffffffff.parquet" in out
    assert out.splitlines()[-1].endswith("; 2 not resolved: the warehouse is not writable to this user"), out


def test_samples_that_are_no_latency_are_found_and_their_cell_measured_again(measured: Path, tmp_path: Path,
                                                                               capsys) -> None:
    """A samples file whose latencies were turned to NaN after the cell was measured: a comparison
    judges the cell from the interval stored at measurement without reading them, so farm check is
    where they are read. It names the file and how many samples; --fix moves the cell aside."""
    import pyarrow as pa

    base = copy_of(measured, tmp_path)
    results = base / "results"
    first, second = sorted((results / "tiny" / "samples").glob("*.parquet"))
    table = pq.read_table(first)
    values = table.column("latency_ms").to_pylist()
    values[len(values) // 2] = float("nan")
    index = table.column_names.index("latency_ms")
    pq.write_table(table.set_column(index, "latency_ms", pa.array(values, pa.float64())), first)
    assert main(["check", "--results", str(results)]) == 1
    out = capsys.readouterr().out
    assert f"{first.name}: 1 of {len(values)} samples are no latency" in out and second.name not in out, out
    assert main(["check", "--fix", "--results", str(results)]) == 1
    con = Warehouse(results, warn=lambda _: None).connect()
    assert con.execute("SELECT list(cell_id) FROM cells").fetchone()[0] == [second.stem]
    capsys.readouterr()
    assert main(["check", "--results", str(results)]) == 0
