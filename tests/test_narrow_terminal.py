"""Commands read in 80 and 100 columns: values whole, never a grid of broken tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.cli import main
from farm.warehouse import Warehouse
from tests.conftest import tiny_cnn, write_sweep


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("narrow")
    tiny_cnn(folder / "tiny.onnx", channels=4, spatial=8)
    config = write_sweep(folder, 'name = "n"\n[[models]]\nsource = "tiny.onnx"\n[axes]\nbatch_sizes = [1, 2]\n'
                                 'backends = ["onnxruntime"]\n')
    assert main(["sweep", str(config), "--results", str(folder / "r"), "--executor", "local"]) == 0
    return folder / "r"


@pytest.mark.parametrize("columns", [80, 100])
def test_a_query_wider_than_the_terminal_prints_records_with_every_value_whole(results: Path, columns: int, capsys,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["query", "SELECT * FROM measurements ORDER BY cell_id", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("-[ row 1 ]") and "-[ row 2 ]" in out and "┃" not in out  # no grid
    stored = Warehouse(results).connect().execute(
        "SELECT cell_id, latency_median_ms FROM measurements ORDER BY cell_id").fetchall()
    lines = out.splitlines()
    for cell_id, median in stored:  # each value on its column's line, every digit of it
        assert ["cell_id", cell_id] in [line.split() for line in lines], out
        assert any(line.split() == ["latency_median_ms", repr(median)] for line in lines), out
    assert main(["query", "SELECT precision, batch FROM cells", "--results", str(results)]) == 0
    assert "┃ precision ┃ batch ┃" in capsys.readouterr().out  # a narrow result stays a table


@pytest.mark.parametrize("columns", [80, 100])
def test_compare_fits_the_terminal_by_leaving_columns_out_and_naming_them(results: Path, columns: int, capsys,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`farm compare` at 80 and 100 columns: every line fits, no value is broken (each pair's latency
    change is whole on its row), and the columns left out are named."""
    import shutil

    from farm.compare import compare_sweeps

    copy = results.parent / f"copy{columns}"
    if not copy.exists():
        shutil.copytree(results, copy)
        config = results.parent / "sweep.toml"
        again = config.read_text().replace('name = "n"', 'name = "m"')
        (results.parent / "again.toml").write_text(again)
        assert main(["sweep", str(results.parent / "again.toml"), "--results", str(copy), "--executor", "local"]) == 0
    capsys.readouterr()  # the sweep's own table
    monkeypatch.setenv("COLUMNS", str(columns))
    main(["compare", "n", "m", "--results", str(copy)])
    out = capsys.readouterr().out
    assert all(len(line) <= columns for line in out.splitlines()), out
    for pair in compare_sweeps("n", "m", copy).pairs:
        row = next(line for line in out.splitlines() if line.startswith(pair.new_id[:8]))
        assert f"{100 * pair.effect.effect:+.1f} %".replace("-", "−") in row, out
    assert f"(hidden at {columns} columns: " in out


def test_show_wide_in_a_narrow_terminal_shows_every_column_as_records(results: Path, capsys,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """--wide promises every column: where they cannot stand side by side, each cell is a record."""
    assert main(["show", "n", "--results", str(results), "--format", "csv"]) == 0
    header = capsys.readouterr().out.splitlines()[0].split(",")
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["show", "n", "--results", str(results), "--wide"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("-[ row 1 ]") and "-[ row 2 ]" in out
    names = {line.split("  ")[0].strip() for line in out.splitlines() if not line.startswith(("-[", "["))}
    # every column (under its short header), the note's mark too, but options and scenario (csv and json
    # only: the variant says them)
    assert len(names) >= len(header) - 2, (names, header)
    assert all(len(line) <= 80 for line in out.splitlines() if not line.startswith("[")), out


@pytest.mark.parametrize("columns", [80, 100])
def test_ls_never_cuts_a_name_or_a_date(results: Path, columns: int, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """`farm ls` with a sweep name too long for a table at this width: each sweep a record, its
    name and last run whole; with short names, a table whose every line fits."""
    import shutil

    copy = results.parent / f"ls{columns}"
    if not copy.exists():
        shutil.copytree(results, copy)
        config = results.parent / "sweep.toml"
        long_name = "corpus-registry-cuda-h200x4-sample36-fp16-b1-b4"
        (results.parent / "long.toml").write_text(config.read_text().replace('name = "n"', f'name = "{long_name}"'))
        assert main(["sweep", str(results.parent / "long.toml"), "--results", str(copy), "--executor", "local"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["ls", "--results", str(copy)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("-[ row 1 ]") and "…" not in out, out
    assert "corpus-registry-cuda-h200x4-sample36-fp16-b1-b4" in out and out.count(" UTC") == 2, out
    assert main(["ls", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert out.lstrip().startswith("sweep") and all(len(line) <= columns for line in out.splitlines()), out
