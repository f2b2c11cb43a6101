"""Recompute a warehouse's median intervals (and the columns that came with them) from its samples.

Warehouses written before the interval came from the raw samples hold a t-interval over the 2-3
repeat medians (`median_ci_method` = `t_over_repeat_medians`): on examples/results up to 2.7 times
the median wide and below zero for two cells. This rewrites, for every cell with raw samples:

  - `median_ci_low_ms`, `median_ci_high_ms`, `median_ci_method`: farm.measure.median_confidence_interval
    over the cell's samples in query order (repeat, iteration). Where the warehouse keeps fewer
    samples than the cell counted (examples/results keeps 500 a cell, thinned), the interval is
    that of the kept samples: wider than the full run's would have been, never narrower (and
    stretched to hold the row's median, which is of all the run's queries, where it lies outside).
  - `latency_p90/p95/p99_tail_samples`: counted from the samples when all of them are kept; when
    they were thinned, the count trtexec's percentile rule leaves above it among `queries`
    samples, int((1 - p/100) * queries) (exact unless the slowest queries tie).
  - `stable` and `max_repeat_spread_percent`: the CV test against the row's own `max_cv_percent`
    and the repeat spread against the row's own `max_repeat_spread_percent` (rows written before
    it: farm.measure.MAX_REPEAT_SPREAD_PERCENT), from the row's own
    `latency_cv_percent` and `repeat_spread_percent` (computed from the full run: kept as they are).

Every measured figure (throughput, latencies, percentiles, CV, repeat spread) is left as it is.
Cells without samples (ingested trtexec summaries) are left alone. The writer lock is held, each
file is replaced atomically, and the dashboard's consolidated copy is refreshed, as `farm check
--fix` does. Without --write it only prints what would change.

    .venv/bin/python benchmarks/recompute_intervals.py [--results examples/results] [--write]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from farm.measure import MAX_REPEAT_SPREAD_PERCENT, PERCENTILES, latency_stats, median_confidence_interval  # noqa: E402
from farm.warehouse import SCHEMAS, Warehouse, write_parquet  # noqa: E402


def tail_counts(latency: np.ndarray, queries: int | None) -> tuple[dict[str, int | None], bool]:
    """Samples above each percentile: counted when the samples are the whole run, else what the
    percentile rule leaves above it among `queries` (second value: whether it was estimated)."""
    if queries is None or len(latency) >= queries:
        stats = latency_stats(latency)
        return {f"latency_p{p}_tail_samples": stats[f"latency_p{p}_tail_samples"] for p in PERCENTILES}, False
    return {f"latency_p{p}_tail_samples": int((np.float32(1) - np.float32(p) / np.float32(100)) * np.float32(queries))
            for p in PERCENTILES}, True


def recomputed(row: dict[str, Any], samples: pa.Table) -> tuple[dict[str, Any], bool]:
    order = np.lexsort((samples.column("iteration").to_numpy(zero_copy_only=False),
                        samples.column("repeat").to_numpy(zero_copy_only=False)))
    latency = samples.column("latency_ms").to_numpy(zero_copy_only=False).astype(np.float64)[order]
    repeat = samples.column("repeat").to_numpy(zero_copy_only=False)[order]
    low, high, method = median_confidence_interval(latency, repeat)
    median = row.get("latency_median_ms")
    if median is not None and low is not None:  # the run's median (of all its queries) stays inside
        low, high = min(low, median), max(high, median)
    new = dict(row, median_ci_low_ms=low, median_ci_high_ms=high, median_ci_method=method)
    tails, estimated = tail_counts(latency[~np.isnan(latency)], row.get("queries"))
    new |= tails
    cv, spread, max_cv = row.get("latency_cv_percent"), row.get("repeat_spread_percent"), row.get("max_cv_percent")
    if cv is not None and max_cv is not None:
        max_spread = row.get("max_repeat_spread_percent") or MAX_REPEAT_SPREAD_PERCENT  # the row's own, if set
        new["stable"] = bool(cv <= max_cv and (spread is None or spread <= max_spread))
        new["max_repeat_spread_percent"] = max_spread
    return new, estimated


def wide(row: dict[str, Any]) -> tuple[bool, bool]:
    """(interval at least 50 % of the median, interval below zero)."""
    low, high, median = row.get("median_ci_low_ms"), row.get("median_ci_high_ms"), row.get("latency_median_ms")
    if low is None or high is None or not median:
        return False, False
    return (high - low) / median >= 0.5, low < 0


def run(results: Path, write: bool, out=print) -> dict[str, int]:
    warehouse = Warehouse(results)
    schema = SCHEMAS["measurements"]
    counts = {"cells": 0, "recomputed": 0, "estimated_tails": 0, "wide_before": 0, "negative_before": 0,
              "wide_after": 0, "negative_after": 0, "stable_changed": 0}
    for sweep in warehouse.sweeps():
        changed = False
        for path in sorted((results / sweep / "measurements").glob("*.parquet")):
            counts["cells"] += 1
            samples_path = results / sweep / "samples" / path.name
            found = pq.read_table(path)
            rows = found.to_pylist()
            if len(rows) != 1 or not samples_path.is_file():
                continue
            samples = pq.read_table(samples_path, columns=["repeat", "iteration", "latency_ms"])
            if samples.num_rows == 0:
                continue
            before = rows[0]
            after, estimated = recomputed(before, samples)
            counts["recomputed"] += 1
            counts["estimated_tails"] += estimated
            for key, row in (("before", before), ("after", after)):
                is_wide, negative = wide(row)
                counts[f"wide_{key}"] += is_wide
                counts[f"negative_{key}"] += negative
            counts["stable_changed"] += before.get("stable") != after.get("stable")
            out(f"{sweep}/{path.stem[:8]}: median {before['latency_median_ms']:.4g} ms, interval "
                f"{before['median_ci_low_ms']:.4g} – {before['median_ci_high_ms']:.4g} ({before['median_ci_method']}) "
                f"-> {after['median_ci_low_ms']:.4g} – {after['median_ci_high_ms']:.4g}; p99 tail "
                f"{after['latency_p99_tail_samples']}{' (estimated)' if estimated else ''}; stable "
                f"{before.get('stable')} -> {after.get('stable')}")
            if write:
                # the current schema: columns the file lacked are written, the others kept as they were
                table = pa.table({f.name: [after.get(f.name)] for f in schema}, schema=schema)
                with warehouse.writer_lock():
                    write_parquet(table.replace_schema_metadata(found.schema.metadata), path)
                changed = True
        if changed:
            with warehouse.writer_lock():
                warehouse.consolidate(sweep)
    out(f"{counts['recomputed']} of {counts['cells']} cells recomputed ({counts['estimated_tails']} with tail counts "
        f"estimated from thinned samples); intervals at least 50 % of the median: {counts['wide_before']} -> "
        f"{counts['wide_after']}; below zero: {counts['negative_before']} -> {counts['negative_after']}; "
        f"stable changed: {counts['stable_changed']}" + ("" if write else " (dry run: --write to rewrite)"))
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "examples" / "results")
    parser.add_argument("--write", action="store_true", help="rewrite the measurements files (else a dry run)")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        print(f"recompute_intervals: no warehouse at {args.results}", file=sys.stderr)
        return 2
    run(args.results, args.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
