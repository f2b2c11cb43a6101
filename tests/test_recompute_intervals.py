"""benchmarks/recompute_intervals.py on a copy of examples/results: intervals from the samples,
every measured figure untouched."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from farm.dashboard.data import Snapshot
from farm.measure import MAX_REPEAT_SPREAD_PERCENT, SAMPLE_INTERVAL_METHOD

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "results"


def script():
    spec = importlib.util.spec_from_file_location("recompute_intervals", ROOT / "benchmarks" / "recompute_intervals.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def copy(tmp_path: Path) -> Path:
    if not (EXAMPLES / "gpu-resnet50" / "samples").is_dir():
        pytest.skip("no examples/results in this checkout")
    target = tmp_path / "results"
    # the recorded gpu-resnet50 sweep alone (gpu-engines has unmeasured cells: no interval to check)
    shutil.copytree(EXAMPLES, target, ignore=shutil.ignore_patterns(".cache", "layers", ".lock", "gpu-engines"))
    # as an older farm wrote them: no tail counts or spread threshold, t-intervals over repeat medians
    new_columns = ["max_repeat_spread_percent", *(f"latency_p{p}_tail_samples" for p in (90, 95, 99))]
    for i, path in enumerate(sorted((target / "gpu-resnet50" / "measurements").glob("*.parquet"))):
        table = pq.read_table(path)
        table = table.drop_columns([c for c in new_columns if c in table.column_names])
        median = table.column("latency_median_ms")[0].as_py()
        low, high = (-0.07 * median, 2.6 * median) if i % 8 == 0 else (0.99 * median, 1.01 * median)
        for column, value in (("median_ci_low_ms", low), ("median_ci_high_ms", high),
                              ("median_ci_method", "t_over_repeat_medians")):
            table = table.set_column(table.column_names.index(column), column,
                                     pa.array([value], table.schema.field(column).type))
        pq.write_table(table, path)
    return target


def rows(root: Path) -> dict[str, dict]:
    return {p.stem: pq.read_table(p).to_pylist()[0] for p in (root / "gpu-resnet50" / "measurements").glob("*.parquet")}


def test_recompute_rewrites_only_the_interval_columns(copy: Path) -> None:
    before = rows(copy)
    assert sum(r["median_ci_low_ms"] < 0 for r in before.values()) == 6  # the case it exists for
    dry = script().run(copy, write=False, out=lambda line: None)
    assert rows(copy) == before  # a dry run writes nothing
    counts = script().run(copy, write=True, out=lambda line: None)
    assert counts == dry and counts["recomputed"] == len(before)
    after = rows(copy)
    recomputed = {"median_ci_low_ms", "median_ci_high_ms", "median_ci_method", "stable", "max_repeat_spread_percent",
                  "latency_p90_tail_samples", "latency_p95_tail_samples", "latency_p99_tail_samples"}
    for cell_id, new in after.items():
        old = before[cell_id]
        # columns newer than the file come back empty (the file is rewritten in today's schema)
        added = {k for k in new if k not in old}
        assert all(new[k] is None for k in added - recomputed), {k: new[k] for k in added}
        assert {k: v for k, v in new.items() if k not in recomputed | added} == {k: v for k, v in old.items()
                                                                                 if k not in recomputed}
        assert new["median_ci_method"] == SAMPLE_INTERVAL_METHOD
        assert 0 < new["median_ci_low_ms"] <= new["latency_median_ms"] <= new["median_ci_high_ms"]
        if new["repeat_spread_percent"] < 10:  # repeats far apart make the median truly uncertain: wide is right
            assert (new["median_ci_high_ms"] - new["median_ci_low_ms"]) / new["latency_median_ms"] < 0.5
        assert 0 <= new["latency_p99_tail_samples"] <= new["latency_p95_tail_samples"] <= new["queries"]
        assert new["stable"] == (new["latency_cv_percent"] <= new["max_cv_percent"]
                                 and new["repeat_spread_percent"] <= MAX_REPEAT_SPREAD_PERCENT)
    wide = [r for r in after.values() if r["median_ci_high_ms"] - r["median_ci_low_ms"] >= 0.5 * r["latency_median_ms"]]
    assert counts["negative_before"] == 6 and counts["negative_after"] == 0 and counts["wide_after"] == len(wide)
    # wide only where the repeats disagree (their t-interval on the log scale: a run may sit anywhere among them)
    assert all(r["repeat_spread_percent"] >= 10 and not r["stable"] for r in wide)
    snap = Snapshot(copy)  # the dashboard reads the new columns (its consolidated copy refreshed)
    assert snap.cell_frame.median_ci_low_ms.gt(0).all() and snap.cell_frame.latency_p99_tail_samples.notna().all()
