"""Does the warehouse stay quick at 100,000 cells? Before and after compaction.

Generates a warehouse of N cells (default 100,000, in sweeps of 25,000) with the warehouse's own
writer (`Warehouse.write_cell`: one Parquet file per cell per table, a `sweeps` row with the plan,
a device), each cell with raw samples, per-layer rows, a build, a measurement and an accuracy row,
then times what people wait for, first on the per-cell files and then after `farm compact`:

  - `farm query` with a typical aggregation (median p99 per model and precision over every cell),
    `farm ls` and `farm show SWEEP`: each as the command, a child process (Python start included);
  - planning a resume: what `farm sweep` does before its first cell (the writer lock, then
    `prepare_sweep`: damaged files, unfinished cells, the status of every cell);
  - the dashboard's data layer per page (the snapshot load, cold, then each page's own work:
    overview, compare over one sweep, a cell's samples and layers, the layer diff of two cells);
  - with --browser, every page in headless Chromium (benchmarks/dashboard_scale.py's harness).

The generated figures are synthetic load-test data (the sweeps say so in their description) and
exist only under --dir. Files are written without fsync while generating (the layout and the
writer are the real ones; only the flush to disk is left out, to generate in minutes).

    .venv/bin/python benchmarks/warehouse_scale.py [--cells 100000] [--dir /tmp/farm-warehouse-scale]
    .venv/bin/python benchmarks/warehouse_scale.py --quick --dir /tmp/wq    # the test suite runs this
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from multiprocessing import Pool
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from farm.measure import SAMPLE_INTERVAL_METHOD  # noqa: E402

MODELS = [f"model{i:02d}" for i in range(10)]
PRECISIONS = ["fp32", "tf32", "fp16", "bf16", "int8"]
BATCHES = [1, 4, 16, 64, 256]
START = datetime(2026, 11, 1, tzinfo=UTC)
DEVICE = {"device_id": "gpu-synthetic", "kind": "cuda", "name": "Synthetic GPU (load test)", "host": "load-test",
          "cpu_cores": 16}
QUERY = ("SELECT model, precision, count(*) AS cells, median(latency_p99_ms) AS p99_ms, max(throughput_qps) AS qps "
         "FROM cells JOIN measurements USING (cell_id) WHERE status = 'ok' GROUP BY ALL ORDER BY ALL")


def cell_key(sweep: int, index: int) -> str:
    return f"{sweep:04x}{index:012x}"


def cell_rows(sweep: str, sweep_index: int, index: int, layers: int, samples: int) -> dict:
    """One synthetic cell's rows, as farm.warehouse.rows makes them for a real one."""
    rng = np.random.default_rng(index)
    model = MODELS[index % len(MODELS)]
    precision = PRECISIONS[(index // 10) % len(PRECISIONS)]
    batch = BATCHES[(index // 50) % len(BATCHES)]
    variant = index // 250
    cell_id = cell_key(sweep_index, index)
    failed = index % 97 == 13  # a few failed cells, as real sweeps have
    latency = (0.5 + batch * 0.05) / (1.0 + PRECISIONS.index(precision) * 0.4 + (variant % 10) * 0.05)
    lat = latency * (1 + 0.03 * rng.standard_normal(samples)).clip(0.5)
    median = float(np.median(lat))
    cells = [{"cell_id": cell_id, "sweep_id": sweep, "run_id": "run0", "model": model, "precision": precision,
              "batch": batch, "backend": "synthetic", "options": json.dumps({"streams": variant + 1}),
              "status": "failed" if failed else "ok", "reason": "synthetic failure" if failed else None,
              "device_id": DEVICE["device_id"], "started_at": START + timedelta(seconds=index),
              "finished_at": START + timedelta(seconds=index + 1), "duration_s": 1.0}]
    if failed:
        return {"cells": cells, "devices": [DEVICE]}
    times = rng.exponential(latency / layers, layers)
    return {
        "builds": [{"cell_id": cell_id, "build_s": 1.0}],
        "measurements": [{
            "cell_id": cell_id, "queries": samples, "throughput_qps": 1000 / float(lat.mean()),
            "throughput_samples_per_s": 1000 * batch / float(lat.mean()), "latency_median_ms": median,
            "latency_mean_ms": float(lat.mean()), "latency_p90_ms": float(np.quantile(lat, 0.9)),
            "latency_p95_ms": float(np.quantile(lat, 0.95)), "latency_p99_ms": float(np.quantile(lat, 0.99)),
            "latency_cv_percent": 3.0, "median_ci_low_ms": median * 0.98, "median_ci_high_ms": median * 1.02,
            "median_ci_method": SAMPLE_INTERVAL_METHOD, "stable": True, "compute_mean_ms": median * 0.9}],
        "samples": pa.table({"cell_id": [cell_id] * samples, "repeat": np.arange(samples, dtype=np.int32) % 3,
                             "iteration": np.arange(samples, dtype=np.int32) // 3, "start_ms": np.cumsum(lat),
                             "latency_ms": lat, "compute_ms": lat * 0.9}),
        "layers": pa.table({"cell_id": [cell_id] * layers, "layer_index": np.arange(layers, dtype=np.int32),
                            "name": [f"layer{i}" for i in range(layers)], "type": ["Conv", "Relu"] * (layers // 2)
                            + ["Conv"] * (layers % 2), "time_avg_ms": times,
                            "time_share_percent": 100 * times / times.sum(), "kind": ["kernel"] * layers,
                            "total_bytes": rng.integers(1_000, 10_000_000, layers)}),
        "accuracy": [{"cell_id": cell_id, "output_name": "y", "cosine_similarity": 0.9999,
                      "verdict": "fail" if precision == "int8" and variant == 0 else "pass",
                      "worst_metric": "cosine_similarity", "worst_value": 0.9999}],
        "cells": cells, "devices": [DEVICE],
    }


def _write_chunk(job: tuple) -> int:
    import pyarrow.parquet as pq

    from farm.warehouse import Warehouse, store
    from farm.warehouse.parquet import write_atomic

    # generation only: the real writer and layout, without the flush to disk (minutes, not an hour)
    store.write_parquet = lambda table, path: write_atomic(path, lambda tmp: pq.write_table(table, tmp))
    root, sweep, sweep_index, first, last, layers, samples = job
    warehouse = Warehouse(root)
    for index in range(first, last):
        warehouse.write_cell(sweep, cell_key(sweep_index, index), cell_rows(sweep, sweep_index, index, layers, samples))
    return last - first


def generate(root: Path, cells: int, per_sweep: int, layers: int, samples: int, workers: int) -> list[str]:
    from farm.warehouse import Warehouse

    warehouse = Warehouse(root)
    sweeps, jobs = [], []
    for s, first in enumerate(range(0, cells, per_sweep)):
        size = min(per_sweep, cells - first)
        sweep = f"scale{s}"
        sweeps.append(sweep)
        with warehouse.writer_lock():
            warehouse.write_sweep_run({
                "run_id": "run0", "sweep_id": sweep, "name": sweep, "started_at": START, "finished_at": START,
                "description": "synthetic load-test data for benchmarks/warehouse_scale.py (not a measurement)",
                "cells_planned": size, "cells_to_run": size,
                "planned_cell_ids": [cell_key(s, i) for i in range(size)]})
        step = max(50, size // (workers * 8))
        jobs += [(str(root), sweep, s, i, min(i + step, size), layers, samples) for i in range(0, size, step)]
    with Pool(workers) as pool:
        for _ in pool.imap_unordered(_write_chunk, jobs):
            pass
    return sweeps


def command(*args: str, timeout: float | None = None) -> float:
    """Wall time of `farm ARGS` as a child process (its output thrown away); inf past `timeout`."""
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "farm", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return float("inf")
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"farm {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds


def timed(function, *args) -> float:
    started = time.perf_counter()
    function(*args)
    return time.perf_counter() - started


def plan_resume(root: Path, sweep: str) -> None:
    """What `farm sweep` does before its first cell, warehouse side (farm.sweep._run_locked): the
    statuses of every cell, the latest plan, and the durations the scheduler orders cells by."""
    from farm.sweep import DURATIONS_SQL
    from farm.warehouse import Warehouse

    warehouse = Warehouse(root)
    with warehouse.writer_lock():
        warehouse.remove_leftovers()
        prepared = warehouse.prepare_sweep(sweep)
        warehouse.latest_plan(sweep)
        warehouse.fetch(warehouse.connect(), DURATIONS_SQL)
    assert len(prepared.statuses) > 0


def page_work(root: Path, sweep: str, cells: tuple[str, str]) -> list[tuple[str, float]]:
    """The dashboard's data layer, page by page (farm/dashboard/views/*, without Streamlit)."""
    from farm.dashboard.data import Snapshot, series_labels, with_noise_intervals, with_speedup
    from farm.dashboard.layer_tables import layer_diff
    from farm.queries import STATUS_COUNTS, sweeps_with_counts

    started = time.perf_counter()
    snap = Snapshot(root)
    rows = [("snapshot load (once per change)", time.perf_counter() - started)]

    def overview() -> None:
        snap.query(sweeps_with_counts(f"{STATUS_COUNTS}, any_value(r.runs) AS runs"))

    def compare() -> None:
        frame = snap.cell_frame[snap.cell_frame.sweep_id == sweep].copy()
        frame["series"] = series_labels(frame)
        measured = with_noise_intervals(snap, frame[frame.status == "ok"])
        with_speedup(measured, measured.series.iloc[0])

    def cell() -> None:
        snap.cell_file(cells[0], "samples")
        snap.cell_file(cells[0], "layers")
        snap.query("SELECT * FROM accuracy WHERE cell_id = ?", [cells[0]])

    def diff() -> None:
        snap.median_intervals(list(cells))
        layer_diff(snap.cell_file(cells[0], "layers"), snap.cell_file(cells[1], "layers"))

    for name, work in (("overview", overview), ("compare (one sweep)", compare), ("cell (samples, layers)", cell),
                       ("diff (two cells' layers)", diff)):
        rows.append((f"page: {name}", timed(work)))
    return rows


def measure(root: Path, sweeps: list[str], cells: tuple[str, str], timeout: float | None,
            pages: bool) -> list[tuple[str, float]]:
    results = str(root)
    rows = [("farm query (aggregation over every cell)", command("query", "--results", results, QUERY,
                                                                  timeout=timeout)),
            ("farm ls", command("ls", "--results", results, timeout=timeout)),
            (f"farm show {sweeps[0]}", command("show", sweeps[0], "--results", results, timeout=timeout)),
            (f"planning a resume of {sweeps[0]}", timed(plan_resume, root, sweeps[0]))]
    return rows + (page_work(root, sweeps[0], cells) if pages else [])


def shown(seconds: float | None, timeout: float | None) -> str:
    if seconds is None:
        return "–"
    return f"> {timeout:.0f}" if seconds == float("inf") else f"{seconds:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=None, help="default 100,000; quick 300")
    parser.add_argument("--per-sweep", type=int, default=None, help="cells per sweep (default 25,000; quick 100)")
    parser.add_argument("--layers", type=int, default=None, help="per cell (default 50, quick 10)")
    parser.add_argument("--samples", type=int, default=None, help="per cell (default 50, quick 20)")
    parser.add_argument("--workers", type=int, default=2, help="processes generating the warehouse")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/farm-warehouse-scale"),
                        help="the warehouse goes to DIR/results (replaced)")
    parser.add_argument("--keep", action="store_true", help="reuse the warehouse generated before (not compacted)")
    parser.add_argument("--quick", action="store_true", help="a few hundred cells: checks the path (the test suite)")
    parser.add_argument("--browser", action="store_true", help="also time every dashboard page in Chromium (after)")
    parser.add_argument("--skip-before", action="store_true", help="time only the compacted warehouse")
    parser.add_argument("--timeout", type=float, default=300, help="cap on each command before compaction (s)")
    args = parser.parse_args(argv)
    args.cells = args.cells if args.cells is not None else (300 if args.quick else 100_000)
    args.per_sweep = args.per_sweep if args.per_sweep is not None else (100 if args.quick else 25_000)
    args.layers = args.layers if args.layers is not None else (10 if args.quick else 50)
    args.samples = args.samples if args.samples is not None else (20 if args.quick else 50)
    if args.cells < 20 or args.per_sweep < 20 or args.layers < 2 or args.samples < 1:
        parser.error("--cells and --per-sweep at least 20, --layers at least 2, --samples at least 1")
    results = args.dir / "results"
    if not (args.keep and results.is_dir()):
        shutil.rmtree(results, ignore_errors=True)
        started = time.perf_counter()
        sweeps = generate(results, args.cells, args.per_sweep, args.layers, args.samples, args.workers)
        files = sum(1 for _ in results.rglob("*.parquet"))
        print(f"generated {args.cells:,} cells in {len(sweeps)} sweeps, {args.cells * args.layers:,} layer rows, "
              f"{args.cells * args.samples:,} samples in {files:,} files, {time.perf_counter() - started:.0f} s",
              flush=True)
    else:
        from farm.warehouse import Warehouse

        sweeps = Warehouse(results).sweeps()
    cells = (cell_key(0, 5), cell_key(0, 15))
    before = {} if args.skip_before else dict(measure(results, sweeps, cells, args.timeout, args.cells <= 20_000))
    for name, seconds in before.items():
        print(f"before  {name:<44} {shown(seconds, args.timeout):>8} s", flush=True)
    started = time.perf_counter()
    command("compact", "--results", str(results))
    files = sum(1 for _ in results.rglob("*.parquet"))
    print(f"farm compact: {time.perf_counter() - started:.1f} s for {args.cells:,} cells ({files:,} files now)",
          flush=True)
    after = measure(results, sweeps, cells, None, True)
    print(f"\n{args.cells:,} cells, {len(sweeps)} sweeps, {os.cpu_count()} cores: seconds, per-cell files -> compacted")
    print(f"{'':<44} {'before':>8} {'after':>8}")
    for name, seconds in after:
        print(f"{name:<44} {shown(before.get(name), args.timeout):>8} {seconds:>8.2f}")
    if args.browser:
        from dashboard_scale import time_pages

        for visit, name, seconds in time_pages(results, None, ("first", "warm")):
            print(f"browser {visit:<6} {name:<34} {seconds:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
