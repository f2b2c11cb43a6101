"""farm history: a configuration across sweeps as a series, and Apache Otava's change points in it:
a planted step found at the run it starts, none in identical runs, the layers that explain a
measured change, and `farm sweep --sweep NAME` that keeps each run beside the others."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pytest

from farm.cli import main
from farm.history import history
from farm.warehouse import Warehouse
from tests.conftest import tiny_cnn, write_sweep

START = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)


def write_series(results: Path, medians: dict[str, list[float]], taken: dict[int, float] | None = None) -> None:
    """Sweeps night-00, night-01, ... each with one ok cell per configuration (`medians`: model ->
    its median latency in each sweep), measured a day apart; `taken`: run -> the % of the CPU time
    other programs took while it was timed (0 for the others)."""
    warehouse = Warehouse(results)
    runs = len(next(iter(medians.values())))
    for run in range(runs):
        sweep = f"night-{run:02d}"
        for number, (model, values) in enumerate(medians.items()):
            cell_id = f"{run:08x}{number:08x}"
            warehouse.write_cell(sweep, cell_id, {
                "cells": [{"cell_id": cell_id, "sweep_id": sweep, "status": "ok", "model": model, "precision": "fp32",
                           "batch": 1, "backend": "onnxruntime", "options": "{}",
                           "finished_at": START + dt.timedelta(days=run)}],
                "measurements": [{"cell_id": cell_id, "latency_median_ms": values[run],
                                  "median_ci_low_ms": values[run] * 0.99, "median_ci_high_ms": values[run] * 1.01,
                                  **({"cpu_others_percent": taken.get(run, 0.0), "cpu_steal_percent": 0.0}
                                     if taken is not None else {})}]})


def noisy(seed: int, runs: int = 30, step_at: int | None = None, step: float = 0.10) -> list[float]:
    values = np.random.default_rng(seed).normal(1.0, 0.02, runs)  # 2 % between-run noise
    if step_at is not None:
        values[step_at:] *= 1 + step
    return [float(v) for v in values]


def test_a_planted_step_is_found_at_its_run_and_identical_runs_have_none(tmp_path: Path, capsys) -> None:
    results = tmp_path / "results"
    write_series(results, {"stepped": noisy(1, step_at=20), "flat": noisy(2), "faster": noisy(3, step_at=12, step=-0.1)})
    found = {s.label.split(" · ")[0]: s for s in history(results)}
    assert [len(s.points) for s in found.values()] == [30, 30, 30]
    [up] = found["stepped"].changes
    assert (up.index, up.sweep) == (20, "night-20") and 0.07 < up.change < 0.13 and up.pvalue < 0.001
    [down] = found["faster"].changes
    assert down.sweep == "night-12" and -0.13 < down.change < -0.07
    assert found["flat"].changes == []
    assert main(["history", "--results", str(results)]) == 1  # a configuration got slower
    out = capsys.readouterr().out
    assert "at night-20: +" in out and "at night-12: −" in out and "flat" not in out
    assert "3 configuration(s) in 2 or more sweeps: 2 with a change point, 1 without (--all lists them)" in out
    assert main(["history", "--results", str(results), "--model", "faster", "--format", "json"]) == 0  # faster only
    [record] = json.loads(capsys.readouterr().out)
    assert len(record["runs"]) == 30 and [c["sweep"] for c in record["change_points"]] == ["night-12"]


@pytest.mark.parametrize("seed", range(10))
def test_thirty_identical_runs_have_no_change_point(tmp_path: Path, seed: int) -> None:
    results = tmp_path / "results"
    write_series(results, {"same": noisy(100 + seed)})
    [series] = history(results)
    assert series.changes == []


def test_too_few_runs_and_no_history_say_so(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    results = tmp_path / "results"
    write_series(results, {"short": [1.0, 1.0, 2.0, 2.0]})
    assert main(["history", "--results", str(results), "--all"]) == 0
    assert "too few runs (under 6)" in capsys.readouterr().out
    single = tmp_path / "single"
    write_series(single, {"once": [1.0]})
    assert main(["history", "--results", str(single)]) == 0
    assert "measured in two sweeps or more" in capsys.readouterr().err
    monkeypatch.setitem(__import__("sys").modules, "otava.analysis", None)  # as where it is not installed
    assert main(["history", "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install --no-deps 'apache-otava==0.8.0'" in err


def test_measured_runs_with_a_planted_slowdown_name_its_run_and_layer(tmp_path: Path, capsys) -> None:
    """Real sweeps, each run kept as a sweep of its own name (farm sweep --sweep): five of the tiny
    CNN, then five whose convolution does thirty times the work (several times the latency: other
    work on a shared box moves a tiny model's runs too, and may add a change point of its own). The
    largest change point is the first planted run's, explained by the planted convolution. ONNX
    Runtime runs on one thread: two, on two cores beside a busy test worker, made a quiet run's
    latency twice another's as the other core came and went, too noisy for p < 0.001 on the few
    runs a side left where the contended ones are left out."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("plant", Path(__file__).parents[1] / "benchmarks" / "plant_slowdown.py")
    plant = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plant)
    tiny_cnn(tmp_path / "tiny.onnx", channels=32, spatial=32)
    assert plant.plant_file(tmp_path / "tiny.onnx", tmp_path / "planted.onnx", factor=30) == "conv"
    results = tmp_path / "results"
    for run in range(10):  # five a side: four left a suite's busy workers without a significant change
        source = "tiny.onnx" if run < 5 else "planted.onnx"
        config = write_sweep(tmp_path, f'name = "h"\n[[models]]\nname = "tiny"\nsource = "{source}"\n'
                                       '[axes]\nbatch_sizes = [1]\nprecisions = ["fp32"]\n'
                                       '[backends.onnxruntime]\nintra_op_threads = 1\n', name="h.toml")
        assert main(["sweep", str(config), "--sweep", f"run-{run}", "--results", str(results),
                     "--executor", "local"]) == 0
    capsys.readouterr()
    [series] = history(results)
    assert [p.sweep for p in series.points] == [f"run-{run}" for run in range(10)]
    assert series.changes, [(p.median_ms, p.contended, p.taken_percent) for p in series.points]
    change = max(series.changes, key=lambda c: abs(c.change))
    assert change.sweep == "run-5" and change.change > 1.0, [(c.sweep, c.change) for c in series.changes]
    assert change.layers is not None and change.layers.rows
    assert all("planted" in (row["name_new"] or "") or row["type"] == "Conv" for row in change.layers.rows[:3])
    assert main(["sweep", str(config), "--sweep", "bad name", "--results", str(results), "--executor", "local"]) == 2
    assert "--sweep 'bad name'" in capsys.readouterr().err

    # the first two planted runs as if other programs had used 60 % of the CPU time while they were
    # timed, the rest quiet: they stay in the series and leave the change points, which still find
    # the step, at the first quiet planted run
    import pyarrow as pa
    import pyarrow.parquet as pq

    for run in range(10):
        for path in (results / f"run-{run}" / "measurements").glob("*.parquet"):
            table = pq.read_table(path)
            for column, value in (("cpu_others_percent", 60.0 if run in (5, 6) else 0.0), ("cpu_steal_percent", 0.0)):
                index = table.column_names.index(column)
                table = table.set_column(index, column, pa.array([value] * table.num_rows, pa.float64()))
            pq.write_table(table, path)
    [series] = history(results)
    assert [p.contended for p in series.points] == [False] * 5 + [True] * 2 + [False] * 3
    change = max(series.changes, key=lambda c: abs(c.change))
    # runs 5 and 6 are many times slower than 60 % of the CPU could make them: the step is theirs
    assert change.sweep == "run-5" and change.change > 1.0, [(c.sweep, c.change) for c in series.changes]
    main(["history", "--results", str(results), "--all"])
    assert "10 (2 contended)" in " ".join(capsys.readouterr().out.split())


def test_a_step_whose_first_runs_were_contended_is_named_at_its_first_run(tmp_path: Path) -> None:
    """Runs 20 and 21 timed while other programs took 60 % of the CPU, the rest quiet: the change
    points come from the quiet runs, and start at run 20 where runs 20 and 21 are at the new level
    beyond what that load could make (a 10x slowdown; a speedup, which load never makes), at run
    22, the first quiet one, where the load could have made them (a 10 % slowdown)."""
    busy = {20: 60.0, 21: 60.0}
    for name, factor, expected in (("tenfold", 10.0, "night-20"), ("faster", 0.9, "night-20"),
                                   ("ten-percent", 1.1, "night-22")):
        values = noisy(4, runs=30)
        values[20:] = [v * factor for v in values[20:]]
        results = tmp_path / name
        write_series(results, {name: values}, taken=busy)
        [series] = history(results)
        assert [p.contended for p in series.points] == [i in busy for i in range(30)]
        assert [c.sweep for c in series.changes] == [expected], (name, [(c.sweep, c.change) for c in series.changes])


def test_a_slowdown_fixed_since_does_not_fail_history(tmp_path: Path) -> None:
    results = tmp_path / "results"
    values = noisy(5, runs=36)
    values[12:24] = [v * 1.2 for v in values[12:24]]  # slower at 12, fixed at 24
    write_series(results, {"fixed": values})
    [series] = history(results)
    assert [(c.sweep, c.change > 0) for c in series.changes] == [("night-12", True), ("night-24", False)]
    assert main(["history", "--results", str(results)]) == 0
