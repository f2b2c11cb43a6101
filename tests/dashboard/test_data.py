"""The comparisons the dashboard and the report show, on hand-made frames and the real warehouse."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from farm.compare.stats import MIN_EFFECT_PERCENT, compare_latencies, ratio_interval, verdict, verdicts
from farm.dashboard.data import Snapshot, fingerprint, pareto_front, series_labels, with_noise_intervals, with_speedup
from farm.dashboard.layer_tables import layer_diff


def frame(rows: list[dict]) -> pd.DataFrame:
    defaults = {"model": "m", "status": "ok", "backend": "onnxruntime", "options": "{}", "profile": None,
                "device": "cpu", "sweep_id": "s", "precision": "fp32", "batch": 1}
    return pd.DataFrame([{**defaults, **r} for r in rows])


def test_pareto_front_keeps_only_undominated_points_per_model() -> None:
    f = frame([
        {"cell_id": "a", "latency_p99_ms": 1.0, "throughput_samples_per_s": 100.0},
        {"cell_id": "b", "latency_p99_ms": 2.0, "throughput_samples_per_s": 300.0},
        {"cell_id": "c", "latency_p99_ms": 3.0, "throughput_samples_per_s": 200.0},  # b is faster and quicker
        {"cell_id": "d", "latency_p99_ms": 2.0, "throughput_samples_per_s": 250.0},  # same latency as b, less
        {"cell_id": "e", "latency_p99_ms": 5.0, "throughput_samples_per_s": 900.0},
        {"cell_id": "f", "latency_p99_ms": 9.0, "throughput_samples_per_s": None},  # not measured
        {"cell_id": "g", "model": "other", "latency_p99_ms": 50.0, "throughput_samples_per_s": 1.0},  # alone
    ])
    front = pareto_front(f)
    assert f.cell_id[front].tolist() == ["a", "b", "e", "g"]


def test_speedup_and_noise_against_a_baseline_series() -> None:
    f = frame([
        {"cell_id": "base1", "precision": "fp32", "batch": 1, "throughput_qps": 100.0, "latency_median_ms": 10.0,
         "median_ci_low_ms": 9.5, "median_ci_high_ms": 10.5},
        {"cell_id": "fast1", "precision": "fp16", "batch": 1, "throughput_qps": 200.0, "latency_median_ms": 5.0,
         "median_ci_low_ms": 4.9, "median_ci_high_ms": 5.1},
        {"cell_id": "same1", "precision": "int8", "batch": 1, "throughput_qps": 101.0, "latency_median_ms": 9.9,
         "median_ci_low_ms": 9.0, "median_ci_high_ms": 10.8},  # a ratio interval of about ±9 %: inconclusive
        {"cell_id": "slow1", "precision": "bf16", "batch": 1, "throughput_qps": 50.0, "latency_median_ms": 20.0,
         "median_ci_low_ms": 19.0, "median_ci_high_ms": 21.0},
        {"cell_id": "nobase", "precision": "fp16", "batch": 8, "throughput_qps": 80.0, "latency_median_ms": 100.0,
         "median_ci_low_ms": 99.0, "median_ci_high_ms": 101.0},  # no fp32 cell at batch 8
        {"cell_id": "failed", "precision": "fp16", "batch": 1, "status": "failed", "throughput_qps": None,
         "latency_median_ms": None, "median_ci_low_ms": None, "median_ci_high_ms": None},
    ])
    f["series"] = series_labels(f)
    out = with_speedup(f, "fp32 · onnxruntime").set_index("cell_id")
    assert out.loc["base1", "speedup"] == 1.0 and out.loc["base1", "vs_baseline"] == "baseline"
    assert out.loc["fast1", "speedup"] == 2.0 and out.loc["fast1", "vs_baseline"] == "faster"
    assert round(out.loc["same1", "speedup"], 2) == 1.01 and out.loc["same1", "vs_baseline"] == "inconclusive"
    assert out.loc["slow1", "speedup"] == 0.5 and out.loc["slow1", "vs_baseline"] == "slower"
    assert pd.isna(out.loc["nobase", "speedup"]) and out.loc["nobase", "vs_baseline"] is None
    assert pd.isna(out.loc["failed", "speedup"]) and out.loc["failed", "vs_baseline"] is None
    assert out.loc["slow1", "latency_ratio"] == 2.0 and out.loc["slow1", "ratio_low"] > 1
    assert out.loc["base1", "latency_ratio"] == 1.0 and pd.isna(out.loc["base1", "ratio_low"])  # no test against itself
    assert set(out.noise_basis.dropna()) == {"stored"}  # no samples in a hand-made frame


def test_a_45_percent_change_is_not_within_noise_even_with_loose_stored_intervals() -> None:
    """The case that misled: the baseline's stored interval (a t-interval over 3 repeat medians)
    reached below zero, it overlapped everything, and a 44.7 % change read 'within noise'. An
    interval that is not around its median or not positive cannot be judged: 'within noise' only
    because it says nothing, and the samples (below) decide instead."""
    f = frame([
        {"cell_id": "base", "precision": "fp32", "throughput_qps": 100.0, "latency_median_ms": 10.0,
         "median_ci_low_ms": 9.9, "median_ci_high_ms": 10.1},
        {"cell_id": "b", "precision": "fp16", "throughput_qps": 180.0, "latency_median_ms": 5.53,
         "median_ci_low_ms": 5.5, "median_ci_high_ms": 5.6},
    ])
    f["series"] = series_labels(f)
    out = with_speedup(f, "fp32 · onnxruntime").set_index("cell_id")
    assert out.loc["b", "vs_baseline"] == "faster" and out.loc["b", "ratio_high"] < 1
    assert verdicts(*ratio_interval(6.78, -0.445, 17.95, 3.75, 3.7, 3.8)[1:]) == "not judged"  # unusable bound


def lognormal(seed: int, n: int, median: float = 5.0, sigma: float = 0.2) -> np.ndarray:
    return median * np.random.default_rng(seed).lognormal(0.0, sigma, n)


@pytest.mark.parametrize("seed", range(20))
def test_a_45_percent_slowdown_is_never_within_noise(seed: int) -> None:
    a, b = lognormal(seed, 300), 1.45 * lognormal(seed + 1000, 300)
    effect = compare_latencies(a, b)
    assert effect.verdict == "slower" and 0 < effect.low <= effect.effect <= effect.high
    assert compare_latencies(b, a).verdict == "faster"


def test_samples_of_one_distribution_are_within_noise() -> None:
    """Two sets from the same distribution, large enough that the ratio's interval (about ±1 %)
    fits inside ±3 %: 'within noise' in at least 95 % of 200 seeded pairs (an exact 95 % test
    falls under 95 % - 4 binomial sd, 91.9 %, with a chance of about 3e-5). Smaller sets are
    'inconclusive', never 'slower' or 'faster'."""
    found = [compare_latencies(lognormal(s, 5000), lognormal(s + 5000, 5000)).verdict for s in range(200)]
    share = found.count("within noise") / len(found)
    assert share >= 0.95 - 4 * np.sqrt(0.95 * 0.05 / len(found)), share
    small = {compare_latencies(lognormal(s, 100), lognormal(s + 5000, 100)).verdict for s in range(20)}
    assert small <= {"within noise", "inconclusive"} and "inconclusive" in small


def test_a_one_percent_change_with_huge_samples_is_within_noise_by_the_minimum_effect() -> None:
    """200,000 queries a side resolve a 1 % change (its interval excludes 1), but 1 % is under the
    minimum effect; 5 % is over it."""
    a = lognormal(1, 200_000, sigma=0.05)
    effect = compare_latencies(a, 1.01 * lognormal(2, 200_000, sigma=0.05))
    assert effect.low > 0 and effect.effect == pytest.approx(0.01, abs=0.002) and effect.verdict == "within noise"
    assert MIN_EFFECT_PERCENT == 3.0  # the documented figure (docs/dashboard.md)
    assert compare_latencies(a, 1.05 * lognormal(2, 200_000, sigma=0.05)).verdict == "slower"


def test_the_verdict_of_a_ratio_interval_against_the_minimum_effect() -> None:
    """One rule (farm.compare.stats): the dashboard's array form gives what `farm compare`'s
    scalar form gives, on a grid of intervals around every boundary."""
    assert verdicts(0.85, 0.95) == "faster" and verdicts(1.05, 1.15) == "slower"
    assert verdicts(0.80, 1.01) == "inconclusive"  # holds 1, but also changes that matter
    assert verdicts(1.005, 1.015) == "within noise"  # real but under the minimum effect
    assert verdicts(float("nan"), float("nan")) == "not judged"  # no interval: cannot tell, never "noise"
    assert list(verdicts([0.8, 0.99], [0.95, 1.01])) == ["faster", "within noise"]
    bounds = [0.9, 0.969, 0.97, 0.971, 0.99, 1.0, 1.01, 1.029, 1.03, 1.031, 1.1, float("nan")]
    pairs = [(lo, hi) for lo in bounds for hi in bounds if not lo > hi]
    assert list(verdicts([lo for lo, _ in pairs], [hi for _, hi in pairs])) == [verdict(lo - 1, hi - 1)
                                                                                for lo, hi in pairs]


def test_series_labels_name_only_what_varies() -> None:
    f = frame([
        {"cell_id": "1", "backend": "torch", "options": json.dumps({"mode": "eager", "device": "cuda"})},
        {"cell_id": "2", "backend": "torch", "options": json.dumps({"mode": "compile", "device": "cuda"})},
        {"cell_id": "3", "backend": "onnxruntime", "options": json.dumps({"threads": 0})},
    ])
    assert series_labels(f).tolist() == ["fp32 · torch mode=eager", "fp32 · torch mode=compile", "fp32 · onnxruntime"]
    two_sweeps = frame([{"cell_id": "1", "sweep_id": "a"}, {"cell_id": "2", "sweep_id": "b", "device": "H200"}])
    assert series_labels(two_sweeps).tolist() == ["fp32 · onnxruntime · cpu · a", "fp32 · onnxruntime · H200 · b"]


def test_the_sweep_summary_names_cells_by_the_same_rule() -> None:
    """The end-of-sweep table's backend column and the dashboard's series come from one rule
    (farm.queries.option_labels): the options that vary within a backend, short scalars only."""
    from farm.display import backend_labels
    from farm.queries import option_labels

    pairs = [("onnxruntime", {"device": "cpu", "files": ["a.json", "b.json"]}),
             ("onnxruntime", {"device": "cuda", "files": ["c.json"]}), ("torch", {"mode": "eager"})]
    assert option_labels(pairs) == ["onnxruntime device=cpu", "onnxruntime device=cuda", "torch"]
    cells = [SimpleNamespace(cell_id=str(i), backend=b, options=o, serving=None, precision="fp32")
             for i, (b, o) in enumerate(pairs)]
    assert backend_labels(cells) == {"0": "onnxruntime device=cpu", "1": "onnxruntime device=cuda", "2": "torch"}


def test_layer_diff_matches_tensorrt_renamings_and_repeats() -> None:
    a = pd.DataFrame({"layer_index": [0, 1, 2, 3], "name": ["Conv_0 + PWN(Clip_3)", "Add_5", "Add_5", "Old_9"],
                      "type": ["Conv", "Add", "Add", "X"], "time_avg_ms": [1.0, 0.5, 0.25, 0.1],
                      "total_bytes": [100, 10, 10, 5]})
    b = pd.DataFrame({"layer_index": [0, 1, 2, 3], "name": ["Conv_0 + Clip_3", "Add_5", "Add_5 [profile 1]", "New_1"],
                      "type": ["Conv", "Add", "Add", "Y"], "time_avg_ms": [0.4, 0.5, 0.35, 0.2],
                      "total_bytes": [50, 10, 12, 7]})
    diff = layer_diff(a, b)
    both = diff[diff.match == "both"].set_index("name_a")
    assert len(both) == 3
    assert both.loc["Conv_0 + PWN(Clip_3)", "name_b"] == "Conv_0 + Clip_3"
    assert round(both.loc["Conv_0 + PWN(Clip_3)", "time_delta_ms"], 6) == -0.6
    assert both.loc["Conv_0 + PWN(Clip_3)", "time_delta_percent"] == -60.0
    assert both.loc["Conv_0 + PWN(Clip_3)", "bytes_delta"] == -50
    repeated = diff[(diff.match == "both") & (diff.name_a == "Add_5")]
    assert sorted(repeated.name_b) == ["Add_5", "Add_5 [profile 1]"]  # first with first, second with second
    assert diff[diff.match == "only A"].name_a.tolist() == ["Old_9"]
    assert diff[diff.match == "only B"].name_b.tolist() == ["New_1"]
    assert diff.time_delta_ms.abs().is_monotonic_decreasing  # largest change first


def test_snapshot_of_the_real_warehouse(warehouse: Path) -> None:
    snap = Snapshot(warehouse)
    cells = snap.cell_frame
    assert snap.sweep_names == ["dash", "trt"]
    assert len(cells) == 18 + 2
    dash = cells[cells.sweep_id == "dash"]
    # bad.onnx fails at fp32 and fp16 (no runtime knows its operator: not the transform's fault)
    assert dash.status.value_counts().to_dict() == {"failed": 6, "unsupported": 6, "ok": 6}
    ok = dash[dash.status == "ok"]
    assert ok.throughput_qps.gt(0).all() and ok.verdict.eq("pass").all()
    assert ok.latency_median_ms.between(ok.median_ci_low_ms, ok.median_ci_high_ms).all()
    cell_id = ok.cell_id.iloc[0]
    samples = snap.cell_file(cell_id, "samples")
    measured = snap.query("SELECT queries FROM measurements WHERE cell_id = ?", [cell_id]).queries.iloc[0]
    assert len(samples) == measured > 0
    fused = snap.query("SELECT layers_after_fusion AS n FROM builds WHERE cell_id = ?", [cell_id]).n.iloc[0]
    assert len(snap.cell_file(cell_id, "layers")) == fused >= 4
    fpn = cells[cells.model == "fpn_int8"].iloc[0]
    assert snap.cell_file(fpn.cell_id, "samples").empty  # a profile has no raw samples
    assert len(snap.cell_file(fpn.cell_id, "layers")) == 113  # the profile's rows (README of the fixtures)
    assert snap.cell_file("no-such-cell", "layers").empty


def test_median_intervals_of_the_real_warehouse(warehouse: Path) -> None:
    """The medians' intervals from each measured cell's samples (the same the sweep stored); the
    ingested trtexec summary, without samples, falls back to its stored interval; a profile has none."""
    snap = Snapshot(warehouse)
    cells = snap.cell_frame
    ok = cells[(cells.sweep_id == "dash") & (cells.status == "ok")]
    assert len(ok) >= 2
    intervals = snap.median_intervals(cells.cell_id)
    measured = intervals.loc[ok.cell_id]
    assert measured.noise_source.eq("samples").all()
    assert (measured.noise_low_ms <= measured.noise_median_ms).all()
    assert (measured.noise_median_ms <= measured.noise_high_ms).all()
    assert np.allclose(measured.noise_low_ms, ok.set_index("cell_id").median_ci_low_ms)  # as the sweep stored them
    assert np.allclose(measured.noise_median_ms, ok.set_index("cell_id").latency_median_ms)
    fpn = cells[cells.model == "fpn_int8"].iloc[0]
    assert pd.isna(intervals.loc[fpn.cell_id].noise_source)  # a profile: no timing at all
    mnist = cells[cells.model == "mnist_trt80"].iloc[0]
    assert intervals.loc[mnist.cell_id].noise_source == "stored"
    assert intervals.loc[mnist.cell_id].noise_median_ms == mnist.latency_median_ms
    joined = with_noise_intervals(snap, cells)
    assert len(joined) == len(cells) and joined.cell_id.tolist() == cells.cell_id.tolist()
    tails = snap.query("SELECT latency_p99_tail_samples AS n, queries FROM measurements JOIN cells USING (cell_id) "
                       "WHERE sweep_id = 'dash'")
    assert len(tails) == len(ok) and (tails.n < tails.queries).all() and (tails.n >= 0).all()


def test_median_intervals_of_older_rows_come_from_the_samples(warehouse: Path, tmp_path: Path) -> None:
    """Rows an older farm wrote (a t-interval over the repeat medians, here one that runs below
    zero) are not trusted: the interval is computed from the cell's samples file."""
    from farm.measure import median_confidence_interval

    copy = tmp_path / "old"
    shutil.copytree(warehouse, copy, ignore=shutil.ignore_patterns(".cache"))
    cell_id = next((copy / "dash" / "samples").glob("*.parquet")).stem
    path = copy / "dash" / "measurements" / f"{cell_id}.parquet"
    table = pq.read_table(path)
    for column, value in (("median_ci_low_ms", -1.0), ("median_ci_high_ms", 99.0),
                          ("median_ci_method", "t_over_repeat_medians")):
        table = table.set_column(table.column_names.index(column), column,
                                 pa.array([value], table.schema.field(column).type))
    pq.write_table(table, path)
    samples = pq.read_table(copy / "dash" / "samples" / f"{cell_id}.parquet").to_pandas()
    low, high, _ = median_confidence_interval(samples.latency_ms.to_numpy(), samples.repeat.to_numpy())
    row = Snapshot(copy).median_intervals([cell_id]).loc[cell_id]
    assert row.noise_source == "samples" and (row.noise_low_ms, row.noise_high_ms) == (low, high)
    assert 0 < low <= row.noise_median_ms <= high


def test_snapshot_reads_files_of_an_older_schema(warehouse: Path, tmp_path: Path) -> None:
    """An older farm wrote fewer columns (and one by another name): they read as nulls, nothing breaks."""
    copy = tmp_path / "old"
    shutil.copytree(warehouse / "dash", copy / "dash")
    for path in (copy / "dash" / "layers").glob("*.parquet"):
        table = pq.read_table(path)
        pq.write_table(table.drop_columns(["input_tensors", "output_tensors", "scratch_bytes"]), path)
    for path in (copy / "dash" / "cells").glob("*.parquet"):
        table = pq.read_table(path)
        names = ["input_shapes" if n == "shapes" else n for n in table.column_names]
        pq.write_table(table.rename_columns(names), path)
    snap = Snapshot(copy)
    assert len(snap.cell_frame) == 18
    assert snap.query("SELECT count(*) AS n FROM cells WHERE shapes IS NULL").n.iloc[0] == 18
    cell_id = snap.cell_frame[snap.cell_frame.status == "ok"].cell_id.iloc[0]
    layers = snap.cell_file(cell_id, "layers")
    assert len(layers) >= 4 and layers.input_tensors.isna().all() and layers.name.notna().all()


def test_fingerprint_changes_when_a_cell_is_written(warehouse: Path, tmp_path: Path) -> None:
    copy = tmp_path / "w"
    shutil.copytree(warehouse, copy)
    before = fingerprint(copy)
    assert fingerprint(copy) == before
    cells = copy / "dash" / "cells"
    victim = next(cells.glob("*.parquet"))
    table = pq.read_table(victim)
    victim.unlink()
    pq.write_table(table, cells / ".new.tmp")
    (cells / ".new.tmp").rename(victim)
    assert fingerprint(copy) != before
    assert fingerprint(tmp_path / "missing") == ("missing",)


def test_layer_diff_of_fp32_against_fp16_on_onnx_runtime_cpu_matches_every_layer(tmp_path: Path) -> None:
    """ONNX Runtime's CPU provider runs an fp16 model's convolution in fp32 and renames it
    `InsertedPrecisionFreeCast_<name>`: the Diff still matches it with the fp32 cell's layer; only
    the casts the fp16 model added are its own."""
    from farm.cli import main
    from tests.conftest import tiny_cnn, write_sweep

    tiny_cnn(tmp_path / "tiny.onnx", channels=4, spatial=8)
    config = write_sweep(tmp_path, 'name = "p"\n[[models]]\nname = "tiny"\nsource = "tiny.onnx"\n[axes]\n'
                                   'precisions = ["fp32", "fp16"]\nbackends = ["onnxruntime"]\n')
    assert main(["sweep", str(config), "--results", str(tmp_path / "r"), "--executor", "local"]) == 0
    snap = Snapshot(tmp_path / "r")
    cells = snap.cell_frame.set_index("precision")
    layers = {p: snap.cell_file(cells.loc[p, "cell_id"], "layers") for p in ("fp32", "fp16")}
    assert any(n.startswith("InsertedPrecisionFreeCast_") for n in layers["fp16"].name)  # what this test is about
    diff = layer_diff(layers["fp32"], layers["fp16"])
    assert (diff.match != "only A").all(), diff  # every fp32 layer found its fp16 counterpart
    assert set(diff[diff.match == "only B"].type_b) <= {"Cast"}, diff
