"""A real sweep from a TOML file into a temporary warehouse, then SQL over it; resume and kill."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from farm.cli import main
from farm.warehouse import TABLES, Warehouse
from tests.conftest import tiny_cnn, tiny_sweep_text, unsupported_op_model, write_sweep

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent

TINY_SWEEP = """
name = "tiny"
[[models]]
source = "models/tiny.onnx"
[axes]
precisions = ["fp32", "fp16", "bf16"]
batch_sizes = [1, 2]
[profiles.small]
batch = "1-1-2"
[profiles.large]
batch = "1-2-4"
"""


def parquet_files(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*.parquet")}


def count(con, sql: str) -> int:
    return con.execute(sql).fetchone()[0]


def test_tiny_sweep_end_to_end(models_dir: Path, capsys, monkeypatch) -> None:
    config = write_sweep(models_dir.parent, TINY_SWEEP)
    results = models_dir.parent / "results"
    monkeypatch.setenv("COLUMNS", "100")  # the end table fits 100 columns, no word split
    assert main(["sweep", str(config), "--results", str(results), "--executor", "local"]) == 0
    out = capsys.readouterr().out
    assert "sweep tiny" in out and "unsupported" in out and "profile axis collapsed" in out
    assert max(len(line) for line in out.splitlines()) <= 100, out
    # each fp16 speedup carries farm compare's verdict on the medians: a ratio in the noise is marked
    fp16 = [line for line in out.splitlines() if " fp16 " in line and " ok " in line]
    assert len(fp16) == 2 and all(re.search(r"\d(x| ~| \?| ·)\s", line) for line in fp16), out
    assert sum(" base " in line for line in out.splitlines()) == 2 and "speedup marks" in out
    undecided = any(re.search(r"\d \?\s", line) for line in fp16)  # a "?" says why and what would decide it
    assert undecided == ("more repeats ([measurement] repeats" in " ".join(out.split())), out

    con = Warehouse(results).connect()
    # 3 precisions x 2 batch sizes; the two profiles collapse for ONNX Runtime; bf16 is unsupported
    assert count(con, "SELECT count(*) FROM sweeps") == 1
    assert count(con, "SELECT count(*) FROM cells") == 6
    assert count(con, "SELECT count(*) FROM cells WHERE status = 'ok'") == 4
    assert count(con, "SELECT count(*) FROM cells WHERE status = 'unsupported'") == 2
    assert count(con, "SELECT count(*) FROM builds") == 4
    assert count(con, "SELECT count(*) FROM measurements") == 4
    assert count(con, "SELECT count(*) FROM devices") == 1
    # one output each: fp32 against its own reference is exact, fp16 close; both pass
    assert con.execute("""SELECT precision, count(*), bool_and(verdict = 'pass'), min(cosine_similarity)
                          FROM accuracy JOIN cells USING (cell_id) GROUP BY 1 ORDER BY 1""").fetchall()[1][:3] == (
        "fp32", 2, True)
    assert count(con, "SELECT count(*) FROM accuracy WHERE verdict = 'pass'") == 4
    assert count(con, "SELECT count(*) FROM builds WHERE precision_transform_s IS NOT NULL") == 2  # the fp16 ones
    queries = count(con, "SELECT sum(queries) FROM measurements")
    assert queries >= 4 * 2 * 5  # 4 cells x 2 repeats x min_iterations
    assert count(con, "SELECT count(*) FROM samples") == queries
    # every node of the optimized graph has a per-layer row, in each measured cell
    assert count(con, "SELECT count(*) FROM layers") == count(con, "SELECT sum(layers_after_fusion) FROM builds")
    assert count(con, "SELECT count(*) FROM cells WHERE profile IS NOT NULL") == 0

    row = con.execute("""SELECT c.host, c.cpu_model, c.cpu_cores, c.versions, c.farm_version, c.config_hash,
                                c.started_at <= c.finished_at, c.device_id = d.device_id
                         FROM cells c JOIN devices d USING (device_id) WHERE c.status = 'ok' LIMIT 1""").fetchone()
    host, cpu, cores, versions, version, config_hash, ordered, joined = row
    assert host and cpu and cores >= 1 and version and len(config_hash) == 16 and ordered and joined
    assert {"onnxruntime", "numpy", "python"} <= set(json.loads(versions))
    m = con.execute("""SELECT latency_min_ms <= latency_median_ms AND latency_median_ms <= latency_p99_ms
                              AND latency_p99_ms <= latency_max_ms, h2d_mean_ms IS NULL AND d2h_mean_ms IS NULL
                              AND enqueue_mean_ms IS NULL, compute_mean_ms > 0, median_ci_low_ms <= median_ci_high_ms
                       FROM measurements""").fetchall()
    assert all(all(r) for r in m)

    # A rerun of the same file writes nothing new.
    before = parquet_files(results)
    assert main(["sweep", str(config), "--results", str(results), "--executor", "local"]) == 0
    assert parquet_files(results) == before
    assert "(resumed)" in capsys.readouterr().out

    # --force reruns every cell; still one row per cell.
    assert main(["sweep", str(config), "--results", str(results), "--executor", "local", "--force"]) == 0
    con = Warehouse(results).connect()
    assert count(con, "SELECT count(*) FROM cells") == 6
    assert count(con, "SELECT count(DISTINCT run_id) FROM cells") == 1
    assert count(con, "SELECT count(*) FROM sweeps") == 2


def test_failed_cells_do_not_stop_the_sweep(models_dir: Path, capsys) -> None:
    unsupported_op_model(models_dir / "bad.onnx")
    (models_dir / "corrupt.onnx").write_bytes(b"\x00\x01 not onnx" * 50)
    config = write_sweep(models_dir.parent, """
        name = "mixed"
        [[models]]
        source = "models/bad.onnx"
        [[models]]
        source = "models/corrupt.onnx"
        [[models]]
        source = "models/tiny.onnx"
        """)
    results = models_dir.parent / "results"
    assert main(["sweep", str(config), "--results", str(results), "--executor", "local"]) == 1
    err = capsys.readouterr().err
    assert "2 cell(s) failed" in err and "NoSuchOperator" in err and "cannot read corrupt.onnx" in err
    con = Warehouse(results).connect()
    rows = dict(con.execute("SELECT model, status FROM cells").fetchall())
    assert rows == {"bad": "failed", "corrupt": "failed", "tiny": "ok"}
    tb = con.execute("SELECT traceback FROM cells WHERE model = 'bad'").fetchone()[0]
    assert "Traceback" in tb
    # failed cells are retried by a rerun; the ok cell is kept
    before = parquet_files(results)
    assert main(["sweep", str(config), "--results", str(results), "--executor", "local"]) == 1
    after = parquet_files(results)
    ok_id = con.execute("SELECT cell_id FROM cells WHERE model = 'tiny'").fetchone()[0]
    assert before[f"mixed/cells/{ok_id}.parquet"] == after[f"mixed/cells/{ok_id}.parquet"]
    bad_id = con.execute("SELECT cell_id FROM cells WHERE model = 'bad'").fetchone()[0]
    assert before[f"mixed/cells/{bad_id}.parquet"] != after[f"mixed/cells/{bad_id}.parquet"]


def test_sigkill_mid_sweep_then_rerun(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    tiny_cnn(models / "tiny.onnx", channels=16, spatial=32)
    config = write_sweep(tmp_path, tiny_sweep_text("killed", tuple(range(1, 9)), measurement={
        "warmup_ms": 10, "min_iterations": 5, "min_duration_ms": 150, "repeats": 2, "layer_iterations": 3}))
    results = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "farm", "sweep", str(config), "--results", str(results),
                             "--executor", "local"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cells_dir = results / "killed" / "cells"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(cells_dir.glob("*.parquet"))) < 2:
        time.sleep(0.02)
    time.sleep(0.13)  # land somewhere inside the next cell
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = len(list(cells_dir.glob("*.parquet")))
    assert 2 <= done_before < 8, "the kill should land mid-sweep"
    for path in results.rglob("*.parquet"):  # whatever was left is readable
        pq.read_table(path)

    assert main(["sweep", str(config), "--results", str(results), "--executor", "local"]) == 0
    con = Warehouse(results).connect()
    ids = [r[0] for r in con.execute("SELECT cell_id FROM cells").fetchall()]
    assert len(ids) == 8 and len(set(ids)) == 8
    for table in ("builds", "measurements"):
        assert con.execute(f"SELECT count(*), count(DISTINCT cell_id) FROM {table}").fetchone() == (8, 8)
    assert count(con, "SELECT count(DISTINCT cell_id) FROM samples") == 8
    assert count(con, "SELECT count(*) FROM cells WHERE status = 'ok'") == 8
    assert not list(results.rglob("*.tmp"))
    for path in results.rglob("*.parquet"):
        pq.read_table(path)
    runs = con.execute("SELECT cells_to_run, cells_resumed FROM sweeps ORDER BY started_at").fetchall()
    assert runs[0] == (8, 0) and runs[1] == (8 - done_before, done_before)


def test_query_ls_show(models_dir: Path, capsys) -> None:
    config = write_sweep(models_dir.parent, TINY_SWEEP)
    results = str(models_dir.parent / "results")
    assert main(["sweep", str(config), "--results", results, "--executor", "local"]) == 0
    capsys.readouterr()

    assert main(["query", "SELECT precision, count(*) AS n FROM cells GROUP BY 1 ORDER BY 1", "--results", results,
                 "--format", "csv"]) == 0
    assert capsys.readouterr().out == "precision,n\nbf16,2\nfp16,2\nfp32,2\n"
    assert main(["query", "SELECT batch, status FROM cells WHERE precision = 'fp32' ORDER BY batch",
                 "--results", results, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"batch": 1, "status": "ok"}, {"batch": 2, "status": "ok"}]
    assert main(["query", "SELECT count(*) AS layers FROM layers", "--results", results]) == 0
    assert "layers" in capsys.readouterr().out

    for fmt in ("table", "csv", "json"):  # every column type prints, timestamps with time zone included
        for table in TABLES:
            assert main(["query", f"SELECT * FROM {table}", "--results", results, "--format", fmt]) == 0
    capsys.readouterr()

    assert main(["query", "SELECT nope FROM cells", "--results", results]) == 2
    assert "query failed" in capsys.readouterr().err

    assert main(["ls", "--results", results]) == 0
    assert "tiny" in capsys.readouterr().out
    assert main(["show", "tiny", "--results", results, "--format", "csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 7 and lines[0].startswith("cell,model,precision,batch")
    assert main(["show", "other", "--results", results]) == 2
    assert "no sweep 'other'" in capsys.readouterr().err
    assert main(["ls", "--results", str(models_dir.parent / "absent")]) == 2


def test_every_table_is_queryable_after_a_sweep(models_dir: Path) -> None:
    """Offline cells and single-stream ones under LoadGen (`serving`): every table has rows."""
    served = TINY_SWEEP.replace("batch_sizes = [1, 2]\n", 'batch_sizes = [1, 2]\nscenarios = ["offline", "single_stream"]\n')
    config = write_sweep(models_dir.parent, served + "[serving]\nmin_duration_ms = 200\nmin_query_count = 20\n")
    results = models_dir.parent / "results"
    assert main(["sweep", str(config), "--results", str(results), "--executor", "local"]) == 0
    con = Warehouse(results).connect()
    for table in TABLES:
        assert count(con, f"SELECT count(*) FROM {table}") > 0, table


def test_show_follows_the_latest_plan(models_dir: Path, capsys) -> None:
    """A sweep file changed so that some cells are named anew (here: accuracy on a different number
    of inputs, which names every cell anew) leaves the earlier cells in the warehouse; `farm show` and the end-of-sweep table
    show the latest plan's cells, say how many earlier ones they leave out, and `--all` shows
    every one. A narrowed sweep file (nothing to run) is recorded as the plan too."""
    results = str(models_dir.parent / "results")
    sweep = TINY_SWEEP.replace('precisions = ["fp32", "fp16", "bf16"]', 'precisions = ["fp32", "fp16"]')
    config = write_sweep(models_dir.parent, sweep)
    assert main(["sweep", str(config), "--results", results, "--executor", "local"]) == 0
    first = set(Warehouse(results).cell_statuses("tiny"))
    capsys.readouterr()
    config = write_sweep(models_dir.parent, sweep + "[accuracy]\nsamples = 8\n")
    assert main(["sweep", str(config), "--results", results, "--executor", "local"]) == 0
    out = capsys.readouterr().out
    statuses = Warehouse(results).cell_statuses("tiny")
    second = set(statuses) - first
    assert len(second) == 4 and len(statuses) == 8  # every cell named anew (the fp32 ones are the reference)
    in_summary = {line[:8] for line in out.splitlines()} & {c[:8] for c in statuses}
    assert in_summary == {c[:8] for c in second}

    def shown(*extra: str) -> tuple[set[str], str]:
        assert main(["show", "tiny", "--results", results, "--format", "csv", *extra]) == 0
        captured = capsys.readouterr()
        return {line.split(",")[0] for line in captured.out.strip().splitlines()[1:]}, captured.err

    latest, err = shown()
    assert len(latest) == 4 and {c[:8] for c in second} <= latest
    assert "4 cell(s) of earlier plans of sweep 'tiny' not shown" in err and "--all" in err
    everything, err = shown("--all")
    assert everything == {c[:8] for c in statuses} and err == ""

    narrowed = write_sweep(models_dir.parent, sweep.replace("batch_sizes = [1, 2]", "batch_sizes = [1]")
                           + "[accuracy]\nsamples = 8\n")
    assert main(["sweep", str(narrowed), "--results", results, "--executor", "local"]) == 0
    capsys.readouterr()
    latest, err = shown()
    assert len(latest) == 2 and "6 cell(s) of earlier plans" in err
    files = parquet_files(Path(results))
    assert main(["sweep", str(narrowed), "--results", results, "--executor", "local"]) == 0
    assert parquet_files(Path(results)) == files  # the same plan again: nothing written


def test_cells_runs_only_the_cells_named(models_dir: Path, capsys) -> None:
    """`--cells PREFIX` runs the planned cells whose id starts so (one cell measured alone, or again
    with --force); a prefix no planned cell has is one line and exit 2, before anything runs."""
    from farm.config import load_config
    from farm.plan import plan_sweep

    config = write_sweep(models_dir.parent, TINY_SWEEP)
    results = models_dir.parent / "results"
    plan = plan_sweep(load_config(config), Warehouse(results).cache_dir)
    chosen = next(c for c in plan.cells if c.precision == "fp32" and c.batch == 2)
    run = ["sweep", str(config), "--results", str(results), "--executor", "local", "--cells"]
    assert main([*run, "zzzz"]) == 2
    assert "--cells 'zzzz': no cell of sweep 'tiny'" in capsys.readouterr().err
    assert not (results / "tiny").exists()
    assert main([*run, chosen.cell_id[:8]]) == 0
    assert f"{len(plan.cells)} cells, 1 chosen by --cells, 1 to run" in capsys.readouterr().err
    con = Warehouse(results).connect()
    assert con.execute("SELECT cell_id, status FROM cells").fetchall() == [(chosen.cell_id, "ok")]
    assert main([*run, chosen.cell_id[:8]]) == 0
    assert "1 chosen by --cells, 0 to run, 1 already in" in capsys.readouterr().err
    first = con.execute("SELECT run_id FROM cells").fetchone()[0]
    assert main([*run, chosen.cell_id[:8], "--force"]) == 0
    assert Warehouse(results).connect().execute("SELECT run_id FROM cells").fetchone()[0] != first


def test_end_table_prints_each_note_once_however_cells_combine_them(tmp_path: Path, capsys) -> None:
    """A cell's notes are footnoted one by one ([1,2]): a rerun's resumed cells, whose other notes
    differ, print the resumed sentence once, not once inside every combination."""
    tiny_cnn(tmp_path / "fixed.onnx", batch=1)
    config = write_sweep(tmp_path, f"""
        name = "notes"
        [[models]]
        source = "{tmp_path / 'fixed.onnx'}"
        [axes]
        precisions = ["fp32", "fp16"]
        batch_sizes = [2]
        """)
    results = tmp_path / "results"
    assert main(["sweep", str(config), "--results", str(results), "--executor", "local"]) == 0
    capsys.readouterr()
    assert main(["sweep", str(config), "--results", str(results), "--executor", "local"]) == 0
    out = capsys.readouterr().out
    footnotes = re.findall(r"^\[(\d+)\] (.*)$", out, re.MULTILINE)
    texts = [text for _, text in footnotes]
    resumed = [number for number, text in footnotes if text.startswith("(resumed)")]
    only = [number for number, text in footnotes if text.startswith("batch 1: the only batch")]
    assert len(resumed) == len(only) == 1 and not any("(resumed)" in t and "the only batch" in t for t in texts), out
    marks = re.findall(r"^\w{8}\s+fixed\s+fp(?:32|16)\s+1\s.*?\[([\d,]+)\]\s*$", out, re.MULTILINE)
    assert len(marks) == 2 and all({resumed[0], only[0]} <= set(m.split(",")) for m in marks), out  # others may apply
