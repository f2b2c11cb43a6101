"""`farm show`: the accuracy verdict and how many queries the p99 stands on, per cell."""

from __future__ import annotations

import csv
import io
from html import escape
from pathlib import Path

from farm.cli import main
from farm.dashboard.data import Snapshot
from farm.measure import MIN_TAIL_SAMPLES
from tests.conftest import plain_cell


def test_show_has_the_accuracy_verdict_and_the_p99_tail(warehouse: Path, capsys) -> None:
    assert main(["show", "dash", "--results", str(warehouse), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 18
    snap = Snapshot(warehouse)
    tails = snap.query("SELECT left(cell_id, 8) AS cell, latency_p99_tail_samples AS n FROM measurements")
    tail_of = dict(zip(tails.cell, tails.n))
    for row in rows:
        if row["status"] == "ok":
            assert row["accuracy"] == "pass"  # the tiny CNN passes at fp32 and fp16
            n = int(tail_of[row["cell"]])
            assert row["p99 tail"] == (f"{n} (few)" if n < MIN_TAIL_SAMPLES else str(n))
        else:  # never measured: no verdict, no tail
            assert row["accuracy"] == "" and row["p99 tail"] == ""


def test_show_marks_a_failed_verdict_with_its_metric(warehouse: Path, tmp_path: Path, capsys) -> None:
    """A copy of the warehouse where one cell's accuracy row fails on cosine similarity."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    copy = tmp_path / "w"
    shutil.copytree(warehouse, copy)
    path = next((copy / "dash" / "accuracy").glob("*.parquet"))
    table = pq.read_table(path)
    for column, value in (("verdict", "fail"), ("worst_metric", "cosine_similarity")):
        table = table.set_column(table.column_names.index(column), column,
                                 pa.array([value] * table.num_rows, table.schema.field(column).type))
    pq.write_table(table, path)
    assert main(["show", "dash", "--results", str(copy), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    failed = [r for r in rows if r["cell"] == path.stem[:8]]
    assert [r["accuracy"] for r in failed] == ["fail: cosine_similarity"]
    assert sum(r["accuracy"] == "pass" for r in rows) == 5


def test_show_prints_each_note_once_below_the_table(warehouse: Path, capsys) -> None:
    """The six unsupported bf16 cells share one reason, the failed cells two: three notes, each
    printed once as a footnote, the rows marked [1], [2], [3]. (Notes of how this machine's load
    moved an unstable cell, its host's speed or other programs' CPU time, come where that happened:
    each is one note however many cells carry it.)"""
    from farm.queries import HOST_MOVED_PERCENT

    assert main(["show", "dash", "--results", str(warehouse)]) == 0
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if line.startswith("[")]
    load = [n for n in notes if f"the host's own speed moved {HOST_MOVED_PERCENT} %" in n or
            "timed while other programs" in n]
    assert len(load) <= 2 and len(notes) - len(load) == 3 and len(set(notes)) == len(notes), notes
    assert sum("bf16 is not supported" in line for line in out.splitlines()) == 1
    assert "[1]" in out and "[3]" in out
    assert main(["show", "dash", "--results", str(warehouse), "--format", "csv"]) == 0  # csv: the note itself
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert sum("bf16 is not supported" in (r["note"] or "") for r in rows) == 6


def test_query_prints_every_digit_the_sql_returns(warehouse: Path, capsys) -> None:
    snap = Snapshot(warehouse)
    qps = float(snap.query("SELECT throughput_qps FROM measurements ORDER BY cell_id LIMIT 1").throughput_qps[0])
    assert main(["query", "SELECT round(throughput_qps, 6) AS six, throughput_qps AS every, 1.0 / 3 AS third "
                 "FROM measurements ORDER BY cell_id LIMIT 1", "--results", str(warehouse)]) == 0
    out = capsys.readouterr().out
    assert repr(round(qps, 6)) in out and repr(qps) in out  # not rounded to 4 significant digits
    assert "0.333333" in out


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "results"


def test_show_fits_100_columns_and_tells_the_torch_modes_apart(capsys, monkeypatch) -> None:
    """The shipped GPU sweep at 100 columns: no line wider, no word cut or folded, eager / compile /
    CUDA graphs of one configuration on rows of their own, and what was left out said."""
    if not (EXAMPLES / "gpu-engines").is_dir():
        import pytest

        pytest.skip("this checkout has no examples/results/gpu-engines")
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["show", "gpu-engines", "--results", str(EXAMPLES)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100
    header = lines[0].split()
    assert header[:3] == ["model", "backend", "prec"] and "status" in header and "p50" in header
    modes = {parts[2] for parts in map(str.split, lines) if parts[:2] == ["resnet50", "torch"]
             and parts[3:5] == ["fp32", "128"]}
    assert modes == {"eager", "compile", "cudagraphs"}, out
    assert "…" not in out and all("unsupported" in line for line in lines if "unsup" in line)  # whole words
    assert "(hidden at 100 columns: stable, cell; --wide or --columns shows them)" in out

    monkeypatch.delenv("COLUMNS")  # a file or pipe with no width: every default column, nothing cut
    assert main(["show", "gpu-engines", "--results", str(EXAMPLES)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:2] == ["cell", "model"] and "hidden at" not in out and "…" not in out
    assert main(["show", "gpu-engines", "--results", str(EXAMPLES), "--wide"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert all(name in header for name in ("p99 ms", "cv %", "build s", "variant", "layers % of compute"))


def test_show_columns_sort_and_markdown(capsys) -> None:
    if not (EXAMPLES / "gpu-resnet50").is_dir():
        import pytest

        pytest.skip("this checkout has no examples/results/gpu-resnet50")
    args = ["show", "gpu-resnet50", "--results", str(EXAMPLES), "--columns", "variant,batch,p50", "--sort", "p50"]
    assert main([*args, "--reverse", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(rows[0]) == ["variant", "batch", "p50 ms"] and len(rows) == 48
    medians = [float(r["p50 ms"]) for r in rows]
    assert medians == sorted(medians, reverse=True)
    assert main([*args, "--format", "markdown"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["| variant | batch | p50 ms |", "|---|---:|---:|"] and len(lines) == 50
    assert main(["show", "gpu-resnet50", "--results", str(EXAMPLES), "--sort", "nonsense"]) == 2
    assert "no column 'nonsense': the columns are cell, model" in capsys.readouterr().err


def test_markdown_values_are_text_never_markup() -> None:
    from farm.cli.common import markdown_table

    text = markdown_table(["model", "p50 ms"], [("![b](http://host/x.png) a|b", 1.5)])
    assert "\\!\\[b\\](http://host/x.png) a\\|b" in text and "![" not in text


def test_dashboard_text_from_the_data_is_never_markdown() -> None:
    """What a model, sweep or reason says reaches the pages' Markdown escaped (farm.dashboard.common.md):
    read by a CommonMark parser it is the same text, with no image, link, emphasis or code in it."""
    from markdown_it import MarkdownIt

    from farm.dashboard.common import md

    parser = MarkdownIt()
    for text in ("![b](http://host/x.png)", "[click](javascript:alert(1))", "**bold** _it_ `code` <img src=x>",
                 "a\\b :red[x] $x^2$ # h", "x` ![b](http://h/y.png) `"):
        html = parser.render(md(text))
        assert not any(tag in html for tag in ("<img", "<a ", "<strong", "<em", "<code", "<h1")), (text, html)
        assert html == f"<p>{escape(text)}</p>\n", (text, html)


def test_terminal_and_csv_output_never_run_what_a_name_says(capsys) -> None:
    """A name or reason with escape sequences or markup brackets is printed as visible text (no
    cursor moves, no retitled terminal, no crash on '[/dim]'); a CSV text a spreadsheet would run as a
    formula starts with an apostrophe, numbers stay as they are."""
    import types

    from rich.console import Console

    from farm.cli.common import print_rows
    from farm.display import ProgressDisplay, render_table

    console = Console(force_terminal=True, width=200)
    progress = ProgressDisplay(console)
    cell = plain_cell("0123456789abcdef", "tiny\x1b]0;owned\x07 [red]x")
    failed = types.SimpleNamespace(status="failed", reason="boom [/dim] \x1b[2J", measurement=None)
    with console.capture() as captured:
        progress.on_sweep_start([cell])
        progress.on_cell_start(cell)
        progress.on_cell_result(cell, failed)
        progress.on_sweep_end()
        console.print(render_table(["model"], [("a\x1b[31mb",)]))
    text = captured.get()
    assert "\x1b]0;" not in text and "\x1b[2J" not in text and "\x1b[31mb" not in text
    assert "\\x1b]0;owned\\x07 [red]x" in text and "boom [/dim] \\x1b[2J" in text and "a\\x1b[31mb" in text
    print_rows(["model", "value"], [("=HYPERLINK(\"http://host\")", -1.5), ("-1.5", 2.0), ("@sum", None)], "csv")
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[1:] == [["'=HYPERLINK(\"http://host\")", "-1.5"], ["-1.5", "2.0"], ["'@sum", ""]]
