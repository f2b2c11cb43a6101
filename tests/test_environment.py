"""Mistakes of the environment are one line and exit 2 (or a failed cell with its reason), with
nothing half-written: --results naming a file, a read-only folder, a full disk, a file size
limit, an empty query. Temporary files live in the warehouse's temp area and never outlive a
run: a failed write removes its own, the next run removes a killed run's."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from farm.cli import main
from farm.dashboard.data import Snapshot
from farm.warehouse import TABLES, Warehouse
from tests.conftest import swept_tiny, tiny_cnn, tiny_sweep_text, write_sweep

ROOT = Path(__file__).resolve().parent.parent
SWEEP = tiny_sweep_text("tiny", precisions=("fp32", "fp16"))


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A base folder with models/, sweep.toml and results/ (4 ok cells)."""
    base = tmp_path_factory.mktemp("environment")
    swept_tiny(base, SWEEP)
    return base


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("farm: error: ") and "Traceback" not in err, err
    return lines[0]


def leftovers(results: Path) -> list[Path]:
    """Temporary files and folders anywhere in the warehouse."""
    found = [p for p in results.rglob("*") if ".tmp" in p.name]
    for area in (results / ".cache" / "tmp", results / ".cache" / "work"):
        found += list(area.iterdir()) if area.is_dir() else []
    return found


def assert_whole(results: Path) -> None:
    """Every table file reads; no temporary file is left."""
    assert not leftovers(results), leftovers(results)
    for table in TABLES:
        for path in results.glob(f"*/{table}/*.parquet"):
            pq.read_table(path)


@contextlib.contextmanager
def small_filesystem(where: Path, size: str):
    """A tmpfs of `size` mounted at `where` (root with mount permission only: skipped elsewhere)."""
    where.mkdir(parents=True)
    if shutil.which("mount") is None:
        pytest.skip("no mount command here")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({mounted.stderr.strip() or 'not permitted'})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_results_naming_a_file_is_one_line_for_every_command(measured: Path, tmp_path: Path, capsys) -> None:
    file = tmp_path / "results.txt"
    file.write_text("not a folder")
    commands = [["sweep", str(measured / "sweep.toml"), "--executor", "local"], ["query", "SELECT 1"], ["ls"],
                ["show", "tiny"], ["report", "tiny", "-o", str(tmp_path / "r.html")],
                ["graph", "abc", "-o", str(tmp_path / "g.dot")], ["check"], ["check", "--fix"]]
    for command in commands:
        assert main([*command, "--results", str(file)]) == 2, command
        assert "is a file, not a warehouse folder" in one_error_line(capsys.readouterr().err)
    assert file.read_text() == "not a folder" and sorted(p.name for p in tmp_path.iterdir()) == ["results.txt"]


def test_an_empty_or_comment_only_query_is_one_line(measured: Path, capsys) -> None:
    for sql in ("", "   ", "-- nothing", "/* nothing */"):
        assert main(["query", sql, "--results", str(measured / "results")]) == 2
        assert "no SQL statement" in one_error_line(capsys.readouterr().err)


def test_an_output_file_that_cannot_be_written_is_one_line(measured: Path, tmp_path: Path, capsys) -> None:
    results = str(measured / "results")
    cell = next((measured / "results" / "tiny" / "cells").glob("*.parquet")).stem
    for command in (["report", "tiny", "-o", str(tmp_path / "missing" / "r.html")],
                    ["graph", cell[:8], "-o", str(tmp_path / "missing" / "g.dot")]):
        assert main([*command, "--results", results]) == 2
        assert "folder does not exist" in one_error_line(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []


def test_an_output_path_that_is_not_a_file_is_never_replaced(measured: Path, tmp_path: Path, capsys) -> None:
    """-o onto a FIFO, a folder (a device node likewise: as root, `-o /dev/null` replaced it) is one
    line and exit 2, and the thing stays what it was; a link is replaced as a link, its target kept."""
    import stat

    results = str(measured / "results")
    cell = next((measured / "results" / "tiny" / "cells").glob("*.parquet")).stem
    fifo, folder = tmp_path / "pipe.html", tmp_path / "folder.dot"
    os.mkfifo(fifo)
    folder.mkdir()
    for command, kind in ((["report", "tiny", "-o", str(fifo)], "a FIFO"),
                          (["graph", cell[:8], "-o", str(folder)], "a folder")):
        assert main([*command, "--results", results]) == 2
        assert f"it is {kind}, and farm replaces only regular files" in one_error_line(capsys.readouterr().err)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and folder.is_dir() and not any(folder.iterdir())
    target, link = tmp_path / "target.dot", tmp_path / "link.dot"
    target.write_text("kept")
    link.symlink_to(target)
    assert main(["graph", cell[:8], "-o", str(link), "--results", results]) == 0
    assert target.read_text() == "kept" and not link.is_symlink() and link.read_text().startswith("digraph")


def test_a_read_only_warehouse_is_read_but_not_written(measured: Path, tmp_path: Path, capsys) -> None:
    if os.geteuid() != 0:
        results = tmp_path / "results"
        shutil.copytree(measured / "results", results)
        for folder, _, _ in os.walk(results):
            os.chmod(folder, 0o555)
        context = contextlib.nullcontext()
    else:  # root writes through permissions: a file system mounted read-only
        context = small_filesystem(tmp_path / "disk", "4m")
    with context:
        if os.geteuid() == 0:
            results = tmp_path / "disk" / "results"
            shutil.copytree(measured / "results", results)
            subprocess.run(["mount", "-o", "remount,ro", str(tmp_path / "disk")], check=True)
        before = sorted((str(p), p.stat().st_mtime_ns) for p in results.rglob("*"))
        where = ["--results", str(results)]
        assert main(["sweep", str(measured / "sweep.toml"), *where, "--executor", "local", "--force"]) == 2
        line = one_error_line(capsys.readouterr().err)
        assert "not writable" in line and str(results) in line
        assert main(["check", "--fix", *where]) == 2
        one_error_line(capsys.readouterr().err)
        # every reader works
        assert main(["query", "SELECT count(*) FROM cells", *where]) == 0
        assert main(["ls", *where]) == 0 and main(["show", "tiny", *where]) == 0
        assert main(["report", "tiny", "-o", str(tmp_path / "report.html"), *where]) == 0
        assert main(["check", *where]) == 0
        assert len(Snapshot(results).cell_frame) == 4
        assert "Traceback" not in capsys.readouterr().err
        assert sorted((str(p), p.stat().st_mtime_ns) for p in results.rglob("*")) == before
        if os.geteuid() != 0:
            for folder, _, _ in os.walk(results):
                os.chmod(folder, 0o755)


def test_a_full_disk_is_one_line_and_leaves_only_whole_files(measured: Path, tmp_path: Path, capsys) -> None:
    """A real ENOSPC: a small tmpfs, filled up to the last 100 kB before the sweep."""
    with small_filesystem(tmp_path / "disk", "2m") as disk:
        results = disk / "results"
        filler = disk / "filler"
        free = shutil.disk_usage(disk).free
        with open(filler, "wb") as out:
            out.write(b"\0" * (free - 100 * 1024))
        where = ["--results", str(results)]
        rc = main(["sweep", str(measured / "sweep.toml"), *where, "--executor", "local"])
        err = capsys.readouterr().err
        assert "Traceback" not in err
        if rc == 2:  # the driver could not write a result
            line = err.strip().splitlines()[-1]
            assert line.startswith("farm: error: cannot write") and "No space left on device" in line, err
            assert "free some space" in line
        else:  # a worker could not write (the fp16 model, its work folder): failed cells with the reason
            assert rc == 1 and "No space left on device" in err, err
        assert_whole(results)
        done = len(list((results / "tiny" / "cells").glob("*.parquet")))
        assert done < 4

        filler.unlink()  # space freed: the same command resumes
        assert main(["sweep", str(measured / "sweep.toml"), *where, "--executor", "local"]) == 0
        assert_whole(results)
        con = Warehouse(results).connect()
        assert con.execute("SELECT count(*) FROM cells WHERE status = 'ok'").fetchone() == (4,)
        assert main(["check", *where]) == 0


def test_a_file_size_limit_is_one_line_and_the_rerun_resumes(measured: Path, tmp_path: Path) -> None:
    """RLIMIT_FSIZE (EFBIG), which needs no privilege: set just below the size of a `cells` file,
    so the sweep fails in the middle of writing its first cell."""
    limit = min(p.stat().st_size for p in (measured / "results" / "tiny" / "cells").glob("*.parquet")) - 1
    results = tmp_path / "results"
    command = [sys.executable, "-m", "farm", "sweep", str(measured / "sweep.toml"), "--results", str(results),
               "--executor", "local"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, preexec_fn=limited)
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]  # after the progress lines
    assert line.startswith("farm: error: cannot write") and "File too large" in line and "ulimit -f" in line
    assert "Traceback" not in proc.stderr
    assert_whole(results)
    assert not list((results / "tiny" / "cells").glob("*.parquet"))  # no cell counts as done

    proc = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert_whole(results)
    con = Warehouse(results).connect()
    assert con.execute("SELECT count(*), count(DISTINCT cell_id) FROM measurements").fetchone() == (4, 4)


def test_the_quantizer_keeps_its_temporary_files_in_the_warehouse(tmp_path: Path) -> None:
    """With the system's temp folder unusable (a file), int8 still works: the quantizer's files
    (the shape-inferred and the augmented model) went to the warehouse's temp area, now empty."""
    from farm.models import InputSpec
    from farm.precision import Calibration, transform

    models = tmp_path / "models"
    models.mkdir()
    model = tiny_cnn(models / "tiny.onnx")
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    saved = tempfile.tempdir
    tempfile.tempdir = str(blocked)
    try:
        spec = (InputSpec("x", "float32", ("batch", 3, 8, 8), -1.0, 1.0),)
        cache = tmp_path / "results" / ".cache"
        result = transform(model, "sha", "int8", spec, {"x": (2, 3, 8, 8)}, Calibration(samples=2), True, cache, 1)
    finally:
        tempfile.tempdir = saved
    assert result.path.is_file() and result.path.parent == cache / "precision"
    assert list((cache / "tmp").iterdir()) == []
    assert sorted(p.name for p in models.iterdir()) == ["tiny.onnx"]  # nothing written beside the model


def test_the_next_run_removes_what_a_killed_run_left(measured: Path, tmp_path: Path, capsys) -> None:
    results = tmp_path / "results"
    shutil.copytree(measured / "results", results)
    cache = results / ".cache"
    # what a SIGKILL leaves, under the names the code writes them by
    left = [cache / "tmp" / "resnet50-v1.onnx.4242.tmp", cache / "tmp" / "quantize.abc123" / "augmented_model.onnx",
            cache / "zoo" / ".resnet50-v1.onnx.4242.tmp", cache / "reference" / ".0a1b.4242.tmp.npz",
            cache / "work" / ("c" * 16) / "model.opt.onnx", results / "tiny" / "samples" / ".x.parquet.4242.tmp"]
    for path in left:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0" * 4096)
    assert main(["sweep", str(measured / "sweep.toml"), "--results", str(results), "--executor", "local"]) == 0
    assert "removed 6 temporary file(s) left by an interrupted run" in capsys.readouterr().err
    assert_whole(results)
    assert (cache / "zoo").is_dir() and (cache / "tmp").is_dir()


def test_a_mistake_found_at_planning_writes_nothing(tmp_path: Path, capsys) -> None:
    """A ConfigError that only planning finds (a calibration file that is not there) exits 2 before
    anything is written: no warehouse folder, no lock file."""
    (tmp_path / "models").mkdir()
    tiny_cnn(tmp_path / "models" / "tiny.onnx")
    path = write_sweep(tmp_path, """
        name = "tiny"
        [[models]]
        source = "models/tiny.onnx"
        calibration = { data = "missing.npz" }
        """)
    results = tmp_path / "results"
    assert main(["sweep", str(path), "--results", str(results), "--executor", "local"]) == 2
    assert "calibration.data: no such file" in one_error_line(capsys.readouterr().err)
    assert not results.exists()
    results.mkdir()  # an empty warehouse stays empty
    assert main(["sweep", str(path), "--results", str(results), "--executor", "local"]) == 2
    assert list(results.iterdir()) == []


def test_only_farms_own_temporary_names_are_leftovers(measured: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(measured / "results", results)
    cache = results / ".cache"
    farms = [cache / "tmp" / "x.onnx.4242.tmp", cache / "tmp" / "verify.abc", cache / "work" / ("0" * 16),
             cache / "zoo" / ".m.onnx.4242.tmp", results / "tiny" / "cells" / ".c.parquet.4242.tmp"]
    others = [cache / "tmp" / "notes.txt", cache / "work" / "mine", cache / "zoo" / ".m.onnx.tmp.keep",
              results / "tiny" / "cells" / ".mine.tmp"]
    for path in farms + others:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    assert sorted(Warehouse(results).leftovers()) == sorted(farms)


@pytest.mark.parametrize("fmt", ["csv", "json", "markdown", "table"])
def test_a_large_query_result_is_printed_as_it_is_read(measured: Path, fmt: str, capsys) -> None:
    """`farm query` prints a result a chunk at a time (farm.warehouse.views.STREAM_ROWS rows), never the
    whole of it held at once: 25,000 rows, more than two chunks, every one printed once, in order, in
    every format."""
    from farm.warehouse.views import STREAM_ROWS

    rows = 2 * STREAM_ROWS + 5_000
    sql = f"SELECT range AS i, 'v' || range AS s, range / 4 AS x FROM range({rows})"
    assert main(["query", sql, "--results", str(measured / "results"), "--format", fmt]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    if fmt == "csv":
        assert lines[0] == "i,s,x" and len(lines) == rows + 1 and lines[-1] == f"{rows - 1},v{rows - 1},{(rows - 1) / 4}"
    elif fmt == "json":
        import json

        parsed = json.loads(out)
        assert [r["i"] for r in parsed] == list(range(rows)) and parsed[-1]["s"] == f"v{rows - 1}"
    elif fmt == "markdown":
        assert lines[1] == "|---:|---|---:|" and len(lines) == rows + 2 and lines[-1].startswith(f"| {rows - 1} |")
    else:  # plain aligned text: a header, a rule, the rows
        assert lines[0].split() == ["i", "s", "x"] and len(lines) == rows + 2
        assert lines[-1].split() == [str(rows - 1), f"v{rows - 1}", str((rows - 1) / 4)]


def test_a_reader_that_stops_early_ends_the_query_quietly(measured: Path) -> None:
    """`farm query ... | head`: the closed pipe ends the command with status 0 and no traceback."""
    command = (f"{sys.executable} -m farm query 'SELECT * FROM range(200000)' --format csv "
               f"--results {measured / 'results'} | head -3")
    done = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert done.returncode == 0 and done.stdout.splitlines() == ["range", "0", "1"], done
    assert "Traceback" not in done.stderr and "Error" not in done.stderr, done.stderr


def test_a_module_two_distributions_install_records_the_version_its_files_state(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """onnxruntime and onnxruntime-gpu both install the module `onnxruntime`; with both there (a GPU
    image with the CPU build preinstalled) the CPU one's record said 1.30.0 where 1.31.1 ran. The
    cell records what the module's own files state, and each distribution that installs it."""
    import importlib

    from farm import provenance

    package = tmp_path / "enginepkg"
    package.mkdir()
    (package / "__init__.py").write_text('"""A fake engine."""\n__version__ = "1.31.1"\n')
    for name, version in (("enginepkg", "1.30.0"), ("enginepkg_gpu", "1.31.1")):
        info = tmp_path / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    monkeypatch.setitem(provenance.SHARED_MODULE, "enginepkg", ("enginepkg-gpu",))
    versions = provenance.library_versions(("enginepkg",))
    assert versions["enginepkg"] == "1.31.1" and versions["enginepkg-gpu"] == "1.31.1"
    plain = tmp_path / "plainpkg"  # no literal in its __init__.py: the distribution's record stands
    plain.mkdir()
    (plain / "__init__.py").write_text("from ._version import __version__\n")
    (tmp_path / "plainpkg-2.0.0.dist-info").mkdir()
    (tmp_path / "plainpkg-2.0.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: plainpkg\nVersion: 2.0.0\n")
    importlib.invalidate_caches()
    assert provenance.library_versions(("plainpkg",))["plainpkg"] == "2.0.0"
