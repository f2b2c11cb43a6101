"""`farm show`: the accuracy verdict and how many queries the p99 stands on, per cell."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from farm.cli import main
from farm.dashboard.data import Snapshot
from farm.measure import MIN_TAIL_SAMPLES


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
    printed once as a footnote, the rows marked [1], [2], [3]."""
    assert main(["show", "dash", "--results", str(warehouse)]) == 0
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if line.startswith("[")]
    assert len(notes) == 3 and len(set(notes)) == 3
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
